"""MobileNet v1 (Howard et al. 2017) and MobileNet v2 (torchvision), ReLU6 as Clip(0, 6).

MobileNet v1 is not in torchvision; it follows the Keras reference (`keras.applications.MobileNet`,
alpha 1.0): Conv/BN/ReLU6 stem, 13 depthwise-separable blocks, global average pool and a
1000-way classifier, written here as a Gemm `fc` (Keras: an equivalent 1x1 conv). Names follow
Keras (`conv_dw_1`, `conv_pw_1_bn`, ...). Keras pads strided convs asymmetrically
(ZeroPadding2D); a symmetric pad of 1 gives the same shapes and is what PyTorch ports use.
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor

# (pointwise out channels, depthwise stride) of the 13 separable blocks
V1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
             (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]


def _conv_bn_relu6(b: GraphBuilder, x: Tensor, name: str, out: int, kernel: int,
                   stride: int = 1, group: int = 1) -> Tensor:
    x = b.conv(x, name, out, kernel, stride, pad=kernel // 2, group=group, bias=False)
    return b.relu6(b.batch_norm(x, f"{name}_bn"), f"{name}_relu")


def mobilenet_v1(b: GraphBuilder, x: Tensor) -> Tensor:
    x = _conv_bn_relu6(b, x, "conv1", 32, 3, stride=2)
    for i, (out, stride) in enumerate(V1_BLOCKS, start=1):
        x = _conv_bn_relu6(b, x, f"conv_dw_{i}", x.channels, 3, stride, group=x.channels)
        x = _conv_bn_relu6(b, x, f"conv_pw_{i}", out, 1)
    assert x.shape == (1, 1024, 7, 7), x.shape
    x = b.flatten(b.global_avg_pool(x, "global_average_pooling2d"), "flatten")
    return b.gemm(x, "fc", 1000, 1024)


# torchvision's inverted residual settings: expand ratio t, out channels c, repeats n, stride s
V2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1)]


def _conv_norm_act(b: GraphBuilder, x: Tensor, name: str, out: int, kernel: int,
                   stride: int = 1, group: int = 1) -> Tensor:
    """torchvision's Conv2dNormActivation: `<name>.0` conv, `.1` BN, `.2` ReLU6."""
    x = b.conv(x, f"{name}.0", out, kernel, stride, pad=(kernel - 1) // 2, group=group,
               bias=False)
    return b.relu6(b.batch_norm(x, f"{name}.1"), f"{name}.2")


def inverted_residual(b: GraphBuilder, x: Tensor, name: str, out: int, stride: int,
                      expand: int) -> Tensor:
    hidden = x.channels * expand
    y, k = x, 0  # k: index inside torchvision's `conv` Sequential (shifts without expansion)
    if expand != 1:
        y, k = _conv_norm_act(b, y, f"{name}.conv.0", hidden, 1), 1
    y = _conv_norm_act(b, y, f"{name}.conv.{k}", hidden, 3, stride, group=hidden)
    y = b.batch_norm(b.conv(y, f"{name}.conv.{k + 1}", out, 1, bias=False), f"{name}.conv.{k + 2}")
    if stride == 1 and x.channels == out:
        y = b.add(x, y, f"{name}.add")
    return y


def mobilenet_v2(b: GraphBuilder, x: Tensor) -> Tensor:
    x = _conv_norm_act(b, x, "features.0", 32, 3, stride=2)
    index = 1
    for expand, out, repeats, stride in V2_SETTINGS:
        for i in range(repeats):
            x = inverted_residual(b, x, f"features.{index}", out, stride if i == 0 else 1, expand)
            index += 1
    x = _conv_norm_act(b, x, f"features.{index}", 1280, 1)
    assert x.shape == (1, 1280, 7, 7), x.shape
    x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten")
    return b.gemm(x, "classifier.1", 1000, 1280)
