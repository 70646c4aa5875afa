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
