"""DenseNet-121 as torchvision builds it (growth 32, bottleneck width 4 x 32, compression 0.5).

As in torchvision's forward, every dense layer concatenates *all* earlier feature maps of its
block (one Concat per layer, fed by every earlier layer) and the block ends with one Concat of
all of them: the many-edge join pattern that makes DenseNet a hard dataflow graph.
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor

GROWTH, BN_SIZE = 32, 4


def _norm_relu_conv(b: GraphBuilder, x: Tensor, name: str, idx: str, out: int,
                    kernel: int) -> Tensor:
    x = b.relu(b.batch_norm(x, f"{name}.norm{idx}"), f"{name}.relu{idx}")
    return b.conv(x, f"{name}.conv{idx}", out, kernel, pad=kernel // 2, bias=False)


def dense_block(b: GraphBuilder, x: Tensor, name: str, layers: int) -> Tensor:
    features = [x]
    for i in range(1, layers + 1):
        layer = f"{name}.denselayer{i}"
        joined = features[0] if len(features) == 1 else b.concat(features, f"{layer}.cat")
        y = _norm_relu_conv(b, joined, layer, "1", BN_SIZE * GROWTH, 1)
        features.append(_norm_relu_conv(b, y, layer, "2", GROWTH, 3))
    return b.concat(features, f"{name}.cat")


def transition(b: GraphBuilder, x: Tensor, name: str) -> Tensor:
    x = _norm_relu_conv(b, x, name, "", x.channels // 2, 1)
    return b.avg_pool(x, f"{name}.pool", 2, 2)


def densenet121(b: GraphBuilder, x: Tensor) -> Tensor:
    x = b.conv(x, "features.conv0", 64, 7, stride=2, pad=3, bias=False)
    x = b.relu(b.batch_norm(x, "features.norm0"), "features.relu0")
    x = b.max_pool(x, "features.pool0", 3, 2, pad=1)
    for i, layers in enumerate([6, 12, 24, 16], start=1):
        x = dense_block(b, x, f"features.denseblock{i}", layers)
        if i < 4:
            x = transition(b, x, f"features.transition{i}")
    x = b.batch_norm(x, "features.norm5")
    assert x.shape == (1, 1024, 7, 7), x.shape
    x = b.flatten(b.global_avg_pool(b.relu(x, "relu"), "avgpool"), "flatten")
    return b.gemm(x, "classifier", 1000, 1024)
