"""Real ONNX exports through the user's path: inspect -> profile -> map (two strategies) -> run,
outputs checked against the reference. The models are exported here, on the CPU, from
torchvision (random weights): shufflenet (Slice bounds computed by Div), mobilenet v3
(HardSwish), efficientnet (weights deduplicated through Identity nodes), squeezenet, a small
ViT (MatMul, LayerNormalization, Softmax, Erf, attention), a small Swin (shifted-window masks),
TorchScript exports at opsets 11-20 with and without constant folding, dynamo exports (opset
18 and 21), an fp16 model, a model with external data, initializers listed as inputs, and
dynamic input dimensions.

Needs torch and torchvision (the `test` extra); skips without them.
"""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch", reason="torch is not installed: pip install -e '.[test]' "
                                            "(the corpus is exported from torchvision)")
torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: "
                                                        "pip install -e '.[test]'")

from hetflow.cli.main import app  # noqa: E402
from hetflow.errors import InputError  # noqa: E402

runner = CliRunner()
SIZE = 112  # torchvision's CNNs pool adaptively: a smaller image keeps the corpus fast
CNNS = ["shufflenet_v2_x1_0", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1"]


def small_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=64, mlp_dim=128, num_classes=10)


def build(name: str):
    torch.manual_seed(0)
    if name == "vit":
        return small_vit().eval(), (1, 3, 32, 32)
    return getattr(torchvision.models, name)(weights=None).eval(), (1, 3, SIZE, SIZE)


def export(model, shape, path, dtype=torch.float32, opset: int = 17, **kw) -> str:
    x = torch.randn(*shape, dtype=dtype)
    # not under no_grad: there torch's attention takes a fused path the exporter cannot export
    torch.onnx.export(model, (x,), str(path), opset_version=opset, dynamo=False,
                      input_names=["input"], output_names=["output"], **kw)
    return str(path)


def cli(*args: str) -> str:
    r = runner.invoke(app, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.output
    return r.output


def through_the_path(model: str, tmp, extra: tuple[str, ...] = ()) -> dict[str, dict]:
    """inspect, profile, map with two strategies, run each plan with every frame checked.
    Returns the run reports by strategy."""
    info = json.loads(cli("inspect", model, "--json", *extra))
    assert info["layers"] and all(l["flops"] is not None for l in info["layers"])
    prof = str(tmp / "p.json")
    cli("profile", model, "-o", prof, "--repeats", "2", "--warmup", "1", *extra)
    reports = {}
    for strategy in ("pipeline", "greedy"):
        plan = str(tmp / f"{strategy}.plan.json")
        cli("map", model, "--profile", prof, "--strategy", strategy, "-o", plan, *extra)
        out = cli("run", plan, "--frames", "12", "--warmup", "2", "--check", "all", "--json")
        rep = json.loads(out[out.index("{"):])
        assert rep["complete"] and rep["checked_frames"] == 12, rep
        reports[strategy] = rep
    return reports


def run_split(graph, parts: int = 2, frames: int = 8):
    """The model cut into `parts` contiguous stages on two CPU elements, run and checked: every
    stage a sub-network of the real export."""
    from hetflow.dataflow.csdf import cnn_to_csdf
    from hetflow.plan.mapping import Mapping
    from hetflow.plan.plan import Plan
    from hetflow.model.subnet import extract_subnet
    from hetflow.platform.spec import ProcessingElement
    from hetflow.runtime.api import run_plan

    names = [l.name for l in graph.layers]
    cut = [names[i * len(names) // parts:(i + 1) * len(names) // parts] for i in range(parts)]
    for stage in cut:  # each stage a self-contained, valid ONNX model
        onnx.checker.check_model(extract_subnet(graph, stage).model, full_check=True)
    cores = sorted(os.sched_getaffinity(0))
    elements = {f"cpu{i}": ProcessingElement(f"cpu{i}", "cpu", (cores[i % len(cores)],))
                for i in range(parts)}
    assignment = {l: f"cpu{i}" for i, stage in enumerate(cut) for l in stage}
    app_ = cnn_to_csdf(graph, assignment, "paper")
    plan = Plan(graph.name, graph.model_hash, "", "split", Mapping(assignment, "paper"), app_,
                elements, 2, {"throughput": 0.0}, "test")
    report = run_plan(plan, graph, frames=frames, warmup=1, check="all")
    assert report.checked_frames == frames
    return report


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    return {name: export(*build(name), d / f"{name}.onnx") for name in [*CNNS, "vit"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", [*CNNS, "vit"])
def test_real_exports_run_through_the_whole_path(name, exported, tmp_path):
    from hetflow.model import load_model

    reports = through_the_path(exported[name], tmp_path)
    assert all(r["max_abs_error"] < 1e-2 for r in reports.values())
    run_split(load_model(exported[name], fuse=True), parts=3 if name == "vit" else 2)


def test_vit_has_transformer_layers_with_flops(exported):
    from hetflow.model import load_model

    g = load_model(exported["vit"])
    ops = {l.op_type for l in g.layers}
    assert {"MatMul", "LayerNormalization", "Softmax", "Erf"} <= ops
    # attention: Q @ K^T over 17 tokens (16 patches + the class token), 2 heads of 32
    scores = [l for l in g.layers if l.op_type == "MatMul" and
              g.tensors[l.outputs[0]].shape[-2:] == (17, 17)]
    assert scores and all(l.flops == 2 * 2 * 17 * 17 * 32 for l in scores)


def test_efficientnet_stages_convert_with_onnx2torch_and_match_ort(exported):
    """The GPU backend's path (onnx2torch) on the sub-networks of efficientnet, whose weights
    the exporter deduplicated through Identity nodes ('onnx::Conv_651' did not resolve)."""
    pytest.importorskip("onnx2torch", reason="onnx2torch is not installed (pip install -e "
                                             "'.[test]')")
    import onnxruntime as ort

    from hetflow.backends.torch_cuda import to_torch_module
    from hetflow.model import load_model
    from hetflow.model.subnet import extract_subnet
    from hetflow.profile.measure import random_feeds

    g = load_model(exported["efficientnet_b0"], fuse=True)
    assert not any(l.op_type == "Identity" for l in g.layers)
    names = [l.name for l in g.layers]
    env = random_feeds(g, g.inputs)
    for i in range(3):
        sub = extract_subnet(g, names[i * len(names) // 3:(i + 1) * len(names) // 3])
        feeds = {t: env[t] for t in sub.inputs}
        want = ort.InferenceSession(sub.serialized(), providers=["CPUExecutionProvider"]).run(
            sub.outputs, feeds)
        module = to_torch_module(sub.model, sub.name)
        with torch.no_grad():
            got = module(*(torch.from_numpy(feeds[t]) for t in sub.inputs))
        got = got if isinstance(got, (tuple, list)) else (got,)
        for t, a, b in zip(sub.outputs, got, want):
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-3, atol=1e-4 * max(1, np.abs(b).max()))
            env[t] = b


@pytest.mark.slow
def test_dynamo_export_runs(tmp_path):
    pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")
    model, shape = build("mobilenet_v3_small")
    path = tmp_path / "dynamo.onnx"
    prog = torch.onnx.export(model, (torch.randn(*shape),), dynamo=True, input_names=["input"],
                             output_names=["output"], verbose=False)
    prog.save(str(path))
    through_the_path(str(path), tmp_path)


def test_swin_with_shifted_window_masks_runs_split(tmp_path):
    """A small Swin transformer (torchvision's blocks): the shifted windows' attention mask is
    computed from shapes of values that fold to constants (Shape of a folded tensor)."""
    from torchvision.models.swin_transformer import SwinTransformer

    from hetflow.model import load_model

    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                            window_size=[4, 4], num_classes=10).eval()
    g = load_model(export(model, (1, 3, 32, 32), tmp_path / "swin.onnx"), fuse=True)
    ops = {op for l in g.layers for op in l.op_type.split("+")}  # fused chains: "MatMul+Add"
    assert {"Softmax", "LayerNormalization", "MatMul"} <= ops, ops
    run_split(g, parts=3)


@pytest.mark.slow
@pytest.mark.parametrize("opset,folding", [(11, True), (11, False), (13, False), (16, True),
                                           (20, True), (20, False)])
def test_opsets_and_constant_folding(opset, folding, tmp_path):
    """The TorchScript exporter from opset 11 (HardSwish decomposed, Clip bounds as inputs)
    to 20, constant folding on and off: loaded, cut into three stages, run and checked."""
    from hetflow.model import load_model

    model, shape = build("mobilenet_v3_small")
    path = export(model, shape, tmp_path / f"m{opset}.onnx", opset=opset,
                  do_constant_folding=folding)
    assert onnx.load(path).opset_import[0].version == opset
    run_split(load_model(path, fuse=True), parts=3)


@pytest.mark.slow
def test_dynamo_export_at_opset_21(tmp_path):
    pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")
    from hetflow.model import load_model

    model, shape = build("squeezenet1_1")
    path = tmp_path / "d21.onnx"
    torch.onnx.export(model, (torch.randn(*shape),), dynamo=True, opset_version=21,
                      input_names=["input"], output_names=["output"]).save(str(path))
    assert onnx.load(str(path)).opset_import[0].version == 21
    run_split(load_model(str(path), fuse=True), parts=3)


@pytest.mark.slow
def test_fp16_model_runs_split_within_fp16_tolerance(tmp_path):
    from hetflow.model import load_model

    model, shape = build("squeezenet1_1")
    path = export(model.half(), shape, tmp_path / "sq16.onnx", dtype=torch.float16)
    g = load_model(path, fuse=True)
    assert g.tensors["output"].dtype == "float16"
    through_the_path(path, tmp_path)
    run_split(g)


@pytest.mark.slow
def test_external_data_and_initializers_as_inputs(tmp_path):
    from hetflow.model import load_model

    model, shape = build("squeezenet1_1")
    # older exporters list every initializer as a graph input too
    path = export(model, shape, tmp_path / "old.onnx", keep_initializers_as_inputs=True)
    m = onnx.load(path)
    assert len(m.graph.input) > 1
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(m, ext / "sq.onnx", save_as_external_data=True, location="sq.weights",
              size_threshold=0)
    assert (ext / "sq.weights").stat().st_size > (ext / "sq.onnx").stat().st_size
    for p in (path, str(ext / "sq.onnx")):
        g = load_model(p, fuse=True)
        assert g.inputs == ["input"]
        run_split(g, parts=3)
    through_the_path(str(ext / "sq.onnx"), tmp_path)


def test_dynamic_input_dims_are_named_and_input_shape_fixes_them(tmp_path):
    from hetflow.model import load_model

    model, shape = build("squeezenet1_1")
    path = export(model, shape, tmp_path / "dyn.onnx",
                  dynamic_axes={"input": {0: "batch", 2: "h", 3: "w"}})
    with pytest.raises(InputError, match=r"input 'input' has dynamic dimension 2 \(h\).*"
                                         r"--input-shape input=1,3,h,w"):
        load_model(path)
    out = cli("inspect", path, "--json", "--input-shape", f"input=1,3,{SIZE},{SIZE}")
    assert json.loads(out)["outputs"]
    run_split(load_model(path, {"input": (1, 3, 64, 64)}, fuse=True))
