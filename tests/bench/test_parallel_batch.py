"""The practitioner's parallel design reads a GPU's best (b, k) from the profile's batch table:
the highest k x b frames a firing time, beside busy copies where measured; none without a
table; the design's notation names lanes then batch."""
from types import SimpleNamespace

from hetflow.bench.baselines import best_batch, design_text


def profile(table):
    return SimpleNamespace(gpu_batches={"gpu0": table})


def test_the_best_rate_wins_beside_busy_copies():
    prof = profile({"1,1": {"alone": {"median": 0.010}, "busy": {"median": 0.012}},
                    "8,1": {"alone": {"median": 0.030}, "busy": {"median": 0.040}},  # 200/s
                    "4,2": {"alone": {"median": 0.030}, "busy": {"median": 0.050}},  # 160/s
                    "16,2": {"alone": {"median": 0.100}, "busy": {"median": 0.300}},  # 107/s
                    # the profile's notes beside the "b,k" entries are not batches
                    "skipped": {"32": "out of memory"}, "seconds": {"alone": 1.5}})
    assert best_batch(prof, "gpu0") == (8, 1)
    assert best_batch(prof, "gpu0", busy=False) == (16, 2)  # 320/s alone


def test_no_table_means_no_batch():
    assert best_batch(SimpleNamespace(), "gpu0") is None
    assert best_batch(profile({}), "gpu0") is None
    assert best_batch(SimpleNamespace(gpu_batches={"gpu1": {"2,1": {"alone": {"median": 1}}}}),
                      "gpu0") is None


def test_the_design_names_lanes_then_batch():
    assert design_text({"gpu0": 2}, {"gpu0": 8}) == " (gpu0 x2 b8)"
    assert design_text({"gpu0": 1}, {"gpu0": 16}) == " (gpu0 b16)"
    assert design_text({"gpu0": 4}, {}) == " (gpu0 x4)"
    assert design_text({"gpu0": 1}, {"gpu0": 1}) == ""


def test_the_balanced_cap_is_measured_against_the_batch_1_copies():
    from hetflow.bench.plans import plan_kinds
    from hetflow.runtime.report import RunReport

    settings = SimpleNamespace(strategies=["greedy"], balanced_latency_share=1.5,
                               balanced_rate_share=0.5, balanced_p99_over_predicted=1.2)
    batched = RunReport("parallel", 100, 5, 400.0, {"p99": 0.08})
    today = RunReport("parallel, batch 1", 100, 5, 250.0, {"p99": 0.02})
    balanced = plan_kinds(settings, batched, today)[-1]
    assert balanced.options["latency_cap"] == 1.5 * 0.02
    assert plan_kinds(settings, batched)[-1].options["latency_cap"] == 1.5 * 0.08
