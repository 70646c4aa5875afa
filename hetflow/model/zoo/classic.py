"""Plain feed-forward classifiers of torchvision: AlexNet, VGG-19 and SqueezeNet 1.0.

torchvision's AlexNet and VGG have an AdaptiveAvgPool2d to 6x6 / 7x7 before the classifier; at a
224x224 input the features are already that size, so the pool is the identity and is omitted
(torch.onnx would export it as a 1x1, stride-1 AveragePool: no work, one more layer to map).
Dropout is omitted: it is the identity at inference.
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor


def alexnet(b: GraphBuilder, x: Tensor) -> Tensor:
    convs = {0: (64, 11, 4, 2), 3: (192, 5, 1, 2), 6: (384, 3, 1, 1), 8: (256, 3, 1, 1),
             10: (256, 3, 1, 1)}  # features index -> (out, kernel, stride, pad)
    for i, (out, k, s, p) in convs.items():
        x = b.relu(b.conv(x, f"features.{i}", out, k, s, p), f"features.{i + 1}")
        if i in (0, 3, 10):
            x = b.max_pool(x, f"features.{i + 2}", 3, 2)
    assert x.shape == (1, 256, 6, 6), x.shape
    return _classifier(b, b.flatten(x, "flatten"), [(1, 4096), (4, 4096), (6, 1000)])


VGG19_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
             512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


def vgg19(b: GraphBuilder, x: Tensor) -> Tensor:
    i = 0
    for v in VGG19_CFG:
        if v == "M":
            x, i = b.max_pool(x, f"features.{i}", 2, 2), i + 1
        else:
            x = b.relu(b.conv(x, f"features.{i}", v, 3, pad=1), f"features.{i + 1}")
            i += 2
    assert x.shape == (1, 512, 7, 7), x.shape
    return _classifier(b, b.flatten(x, "flatten"), [(0, 4096), (3, 4096), (6, 1000)])


def _classifier(b: GraphBuilder, x: Tensor, linears: list[tuple[int, int]]) -> Tensor:
    """torchvision's `classifier`: Linear + ReLU pairs (Dropouts omitted), the last without ReLU."""
    for j, (index, out) in enumerate(linears):
        x = b.gemm(x, f"classifier.{index}", out, x.shape[1])
        if j < len(linears) - 1:
            x = b.relu(x, f"classifier.{index + 1}")
    return x


def _fire(b: GraphBuilder, x: Tensor, name: str, squeeze: int, expand: int) -> Tensor:
    s = b.relu(b.conv(x, f"{name}.squeeze", squeeze, 1), f"{name}.squeeze_activation")
    e1 = b.relu(b.conv(s, f"{name}.expand1x1", expand, 1), f"{name}.expand1x1_activation")
    e3 = b.relu(b.conv(s, f"{name}.expand3x3", expand, 3, pad=1),
                f"{name}.expand3x3_activation")
    return b.concat([e1, e3], f"{name}.cat")


def squeezenet1_0(b: GraphBuilder, x: Tensor) -> Tensor:
    x = b.relu(b.conv(x, "features.0", 96, 7, stride=2), "features.1")
    fires = {3: (16, 64), 4: (16, 64), 5: (32, 128), 7: (32, 128), 8: (48, 192), 9: (48, 192),
             10: (64, 256), 12: (64, 256)}  # features index -> (squeeze, expand); pools between
    for i in range(2, 13):
        if i in fires:
            x = _fire(b, x, f"features.{i}", *fires[i])
        else:
            x = b.max_pool(x, f"features.{i}", 3, 2, ceil_mode=True)
    assert x.shape == (1, 512, 13, 13), x.shape
    x = b.relu(b.conv(x, "classifier.1", 1000, 1), "classifier.2")
    return b.flatten(b.global_avg_pool(x, "classifier.3"), "flatten")
