"""ResNet-18 and ResNet-50 as torchvision builds them (v1.5: the stride sits on the 3x3 conv).

torchvision reuses one `relu` module per block; ONNX needs one node per use, so the second and
third uses are `relu_1`, `relu_2` (the names torch.onnx gives them).
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor


def _conv_bn(b: GraphBuilder, x: Tensor, conv: str, bn: str, out: int, kernel: int,
             stride: int = 1) -> Tensor:
    x = b.conv(x, conv, out, kernel, stride, pad=kernel // 2, bias=False)
    return b.batch_norm(x, bn)


def _shortcut(b: GraphBuilder, x: Tensor, name: str, out: int, stride: int) -> Tensor:
    if stride == 1 and x.channels == out:
        return x
    return _conv_bn(b, x, f"{name}.downsample.0", f"{name}.downsample.1", out, 1, stride)


def basic_block(b: GraphBuilder, x: Tensor, name: str, planes: int, stride: int) -> Tensor:
    y = b.relu(_conv_bn(b, x, f"{name}.conv1", f"{name}.bn1", planes, 3, stride), f"{name}.relu")
    y = _conv_bn(b, y, f"{name}.conv2", f"{name}.bn2", planes, 3)
    y = b.add(y, _shortcut(b, x, name, planes, stride), f"{name}.add")
    return b.relu(y, f"{name}.relu_1")


def bottleneck(b: GraphBuilder, x: Tensor, name: str, planes: int, stride: int) -> Tensor:
    y = b.relu(_conv_bn(b, x, f"{name}.conv1", f"{name}.bn1", planes, 1), f"{name}.relu")
    y = b.relu(_conv_bn(b, y, f"{name}.conv2", f"{name}.bn2", planes, 3, stride),
               f"{name}.relu_1")
    y = _conv_bn(b, y, f"{name}.conv3", f"{name}.bn3", planes * 4, 1)
    y = b.add(y, _shortcut(b, x, name, planes * 4, stride), f"{name}.add")
    return b.relu(y, f"{name}.relu_2")


def _resnet(b: GraphBuilder, x: Tensor, block, depths: list[int]) -> Tensor:
    x = b.relu(_conv_bn(b, x, "conv1", "bn1", 64, 7, stride=2), "relu")
    x = b.max_pool(x, "maxpool", 3, 2, pad=1)
    for stage, (planes, depth) in enumerate(zip([64, 128, 256, 512], depths), start=1):
        for i in range(depth):
            stride = 2 if stage > 1 and i == 0 else 1
            x = block(b, x, f"layer{stage}.{i}", planes, stride)
    assert x.shape[2:] == (7, 7), x.shape
    x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten")
    return b.gemm(x, "fc", 1000, x.shape[1])


def resnet18(b: GraphBuilder, x: Tensor) -> Tensor:
    return _resnet(b, x, basic_block, [2, 2, 2, 2])


def resnet50(b: GraphBuilder, x: Tensor) -> Tensor:
    return _resnet(b, x, bottleneck, [3, 4, 6, 3])
