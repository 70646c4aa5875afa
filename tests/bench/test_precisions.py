"""The copies at each precision calibrate the cost model beside the fp32 copies: their GPUs'
rates beside the busy cores join the contention step, nothing else of theirs does."""
from hetflow.bench.precisions import with_precision_copies

FP32 = {"lanes_alone": {"gpu0": {"24": 4269.6}},
        "contention": {"busy_fps": {"cpu0": 38.5, "gpu0": 8925.7}, "busy_lanes": {"gpu0": 8},
                       "busy_batch": {"gpu0": 32}, "source": "the bench's parallel baseline"}}
FP16 = {"busy_fps": {"gpu0@fp16": 19900.0}, "busy_lanes": {"gpu0@fp16": 8},
        "busy_batch": {"gpu0@fp16": 32}}


def test_the_gpus_at_other_precisions_join_the_contention_step():
    out = with_precision_copies(FP32, FP16)
    step = out["contention"]
    assert step["busy_fps"] == {"cpu0": 38.5, "gpu0": 8925.7, "gpu0@fp16": 19900.0}
    assert step["busy_lanes"] == {"gpu0": 8, "gpu0@fp16": 8}
    assert step["busy_batch"] == {"gpu0": 32, "gpu0@fp16": 32}
    assert "each precision" in step["source"]
    assert out["lanes_alone"] == FP32["lanes_alone"]
    assert FP32["contention"]["busy_fps"] == {"cpu0": 38.5, "gpu0": 8925.7}  # left as it was


def test_without_a_contention_step_or_precision_copies_nothing_changes():
    no_step = {"lanes_alone": FP32["lanes_alone"]}
    assert with_precision_copies(no_step, FP16) == no_step
    empty = {"busy_fps": {}, "busy_lanes": {}, "busy_batch": {}}
    assert with_precision_copies(FP32, empty) == FP32


def test_elements_outside_the_tolerance_are_named_with_why():
    from types import SimpleNamespace

    from hetflow.bench.precisions import refused_precisions
    from hetflow.model.accuracy import Tolerance
    from hetflow.profile.deviation import META_KEY

    def record(rel_l2, agreement):
        return {"frames": 8, "passed": True, "outputs": [
            {"name": "output", "frames": 8, "rel_l2_worst": rel_l2, "rel_l2_median": rel_l2,
             "max_abs_worst": 0.04, "max_abs_median": 0.04, "top1_agreement": agreement}]}

    prof = SimpleNamespace(meta={META_KEY: {"cpu0@int8": record(0.015, 0.875),
                                            "cpu0-1@int8": record(0.08, 1.0),
                                            "gpu0@fp16": record(0.001, 1.0)}})
    refused = refused_precisions(prof, None)  # the default: rel L2 0.05, no top-1 flip
    assert set(refused) == {"cpu0@int8", "cpu0-1@int8"}
    assert "top1 flips 0.125 > 0" in refused["cpu0@int8"]
    assert "rel" in refused["cpu0-1@int8"] and "0.08" in refused["cpu0-1@int8"]
    assert refused_precisions(prof, Tolerance(rel_l2=0.1, top1_flips=0.2)) == {}
