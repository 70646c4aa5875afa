"""The screen of a GPU's reduced precisions under `--precision auto`: the first within the
tolerance, in `GPU_PREFERENCE` order, is profiled; the ones after it and the ones missing the
tolerance are not; every other element is kept."""
from hypothesis import given, settings, strategies as st

from hetflow.model.accuracy import Tolerance
from hetflow.platform import CpuCluster, Platform
from hetflow.platform.precision import GPU_PREFERENCE, precision_variants
from hetflow.platform.spec import Gpu
from hetflow.profile.deviation import screen_gpu_precisions


def record(rel_l2: float) -> dict:
    return {"frames": 8, "passed": True, "outputs": [
        {"name": "logits", "frames": 8, "rel_l2_worst": rel_l2, "rel_l2_median": rel_l2,
         "max_abs_worst": 0.01, "max_abs_median": 0.01, "top1_agreement": 1.0}]}


def auto_elements(gpus: int) -> list:
    plat = Platform("t", (CpuCluster("c", (0, 1)),),
                    tuple(Gpu(i, "gpu", 1) for i in range(gpus)))
    return list({e.name: e for v in precision_variants(plat, "auto")
                 for e in v.all_elements()}.values())


@settings(max_examples=60, deadline=None)
@given(gpus=st.integers(1, 2), errors=st.lists(st.sampled_from([0.001, 0.03, 0.2]),
                                               min_size=6, max_size=6),
       limit=st.sampled_from([0.01, 0.05, 0.5]))
def test_the_first_precision_within_the_tolerance_is_kept_and_no_other(gpus, errors, limit):
    elements = auto_elements(gpus)
    error_of = {}
    for g in range(gpus):
        for i, p in enumerate(GPU_PREFERENCE):
            error_of[f"gpu{g}@{p}"] = errors[(3 * g + i) % len(errors)]
    checked = []

    def deviation(graph, element):
        checked.append(element.name)
        return record(error_of[element.name])

    kept, left_out, records = screen_gpu_precisions(None, elements, Tolerance(rel_l2=limit),
                                                    deviation)
    names = {e.name for e in kept}
    assert set(records) == set(checked)  # each checked once, and recorded
    for g in range(gpus):
        order = [f"gpu{g}@{p}" for p in GPU_PREFERENCE]
        passing = [n for n in order if error_of[n] <= limit]
        first = passing[0] if passing else None
        assert [n for n in order if n in names] == ([first] if first else [])
        # checked: the ones up to the first within the tolerance, in order
        assert [n for n in checked if n in order] == order[:order.index(first) + 1 if first
                                                           else len(order)]
        for n in order:
            if n == first:
                continue
            assert n in left_out
            assert ("misses the tolerance" in left_out[n]) == (n in records)
    # fp32 elements and every CPU element (int8 too) stay
    assert all(e.name in names for e in elements if e.kind != "gpu" or e.precision == "fp32")
