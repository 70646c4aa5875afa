"""Platforms (what a machine offers) and their processing-element configurations."""
from hetflow.platform.configs import (PeConfig, all_elements, cluster_partitions, configurations,
                                      count_configurations, distinct_elements, integer_partitions)
from hetflow.platform.detect import detect_platform
from hetflow.platform.load import (bundled_platforms, dump_platform, load_platform,
                                   platform_from_dict, resolve_platform)
from hetflow.platform.precision import (PRECISIONS, PRECISIONS_OF_KIND, parse_precisions,
                                        with_precisions)
from hetflow.platform.spec import Accelerator, CpuCluster, Gpu, Platform, ProcessingElement

__all__ = [
    "Accelerator", "CpuCluster", "Gpu", "PRECISIONS", "PRECISIONS_OF_KIND", "PeConfig",
    "Platform", "ProcessingElement",
    "all_elements", "bundled_platforms", "cluster_partitions", "configurations",
    "count_configurations", "detect_platform", "distinct_elements", "dump_platform",
    "integer_partitions", "load_platform", "parse_precisions", "platform_from_dict",
    "resolve_platform", "with_precisions",
]
