"""scripts/soak.py's verdict: a run passes only where its last window kept the first window's
rate and neither memory nor the open descriptors grew."""
import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "soak", Path(__file__).resolve().parents[1] / "scripts" / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)


def curve(rates, rss=100.0, rss_end=None, fds=10, fds_end=None, every=5.0):
    """Samples of a run at `rates` frames/s per window (the first sample has no window)."""
    out = [{"t_s": 0.0, "frames": 0, "fps": None, "rss_mb": rss, "fds": fds, "device_mb": None}]
    for i, r in enumerate(rates, 1):
        last = i == len(rates)
        out.append({"t_s": i * every, "frames": out[-1]["frames"] + int(r * every), "fps": r,
                    "rss_mb": rss_end if last and rss_end is not None else rss,
                    "fds": fds_end if last and fds_end is not None else fds,
                    "device_mb": None})
    return out


def test_a_steady_run_passes_through_the_noise_of_single_samples():
    # windows of two samples: the first after the warm-up at 100, the last at 98
    v = soak.verdict(curve([50, 100, 100, 110, 90, 120, 99, 97]), warmup_s=5, window_s=10)
    assert v["ok"], v["why"]
    assert v["rate_ratio"] == pytest.approx(0.98)  # the warm-up's 50 left out
    assert v["first_window"]["from_s"] == 5 and v["last_window"]["to_s"] == 40


@pytest.mark.parametrize("samples, says", [
    (curve([100, 100, 100, 100, 96, 96]), "rate fell"),
    (curve([100] * 6, rss_end=106.0), "rss_mb grew 6.0%"),
    (curve([100] * 6, fds_end=13), "open descriptors grew by 3"),
    (curve([100, 100, 100]), "too short for two 10 s windows"),
])
def test_a_slower_or_growing_run_fails_saying_why(samples, says):
    v = soak.verdict(samples, warmup_s=5, window_s=10)
    assert not v["ok"] and says in "; ".join(v["why"])


def test_help_runs(capsys):
    with pytest.raises(SystemExit) as e:
        soak.main(["--help"])
    assert e.value.code == 0 and "RATE_FLOOR" in capsys.readouterr().out
