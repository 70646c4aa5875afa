"""Frame sources: .npz arrays and image folders, with clear errors for bad input."""
import numpy as np
import pytest

from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.api import make_source

PIL = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) is not installed")


@pytest.fixture(scope="module")
def graph():
    return random_cnn_graph(6, 0, channels=3, size=16)


def test_image_folder_frames(graph, tmp_path):
    rng = np.random.default_rng(0)
    for i in range(3):
        PIL.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    source, n = make_source(graph, str(tmp_path))
    assert n == 3
    x = source(4)["input"]  # frames cycle
    assert x.shape == (1, 3, 16, 16) and x.dtype == np.float32
    assert np.array_equal(x, source(1)["input"])
    assert not np.array_equal(source(0)["input"], source(1)["input"])


def test_bad_inputs_are_named(graph, tmp_path):
    with pytest.raises(InputError, match="no images"):
        make_source(graph, str(tmp_path))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="broken.png: not a readable image"):
        make_source(graph, str(tmp_path))
    with pytest.raises(InputError, match="use 'random', an .npz file"):
        make_source(graph, "nothing-here")
    np.savez(tmp_path / "x.npz", wrong=np.zeros((2, 3, 16, 16), np.float32))
    with pytest.raises(InputError, match="no array named 'input'"):
        make_source(graph, str(tmp_path / "x.npz"))


def test_npz_frames(graph, tmp_path):
    a = np.random.default_rng(1).standard_normal((5, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "f.npz", input=a)
    source, n = make_source(graph, str(tmp_path / "f.npz"))
    assert n == 5 and np.array_equal(source(6)["input"], a[1][None])
