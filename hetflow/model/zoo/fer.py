"""Emotion FER+ (Barsoum et al. 2016): a VGG-like net on 64x64 grey faces, 8 emotions.

The structure of `fer_plus()` in shared/anchors/anchor_bench.py: ten 3x3 conv(bias)+ReLU layers
in four groups, each group ending in a 2x2 max pool, then three fully connected layers
(4096 -> 1024 -> 1024 -> 8). No BatchNorm and no Softmax (the ONNX zoo model ends with the
last fully connected layer too). Dropout is omitted (identity at inference).
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor

GROUPS = [[64, 64], [128, 128], [256, 256, 256], [256, 256, 256]]


def emotion_ferplus(b: GraphBuilder, x: Tensor) -> Tensor:
    for g, channels in enumerate(GROUPS, start=1):
        for j, out in enumerate(channels, start=1):
            x = b.relu(b.conv(x, f"conv{g}_{j}", out, 3, pad=1), f"relu{g}_{j}")
        x = b.max_pool(x, f"pool{g}", 2, 2)
    assert x.shape == (1, 256, 4, 4), x.shape
    x = b.flatten(x, "flatten")
    x = b.relu(b.gemm(x, "fc1", 1024, 4096), "relu_fc1")
    x = b.relu(b.gemm(x, "fc2", 1024, 1024), "relu_fc2")
    return b.gemm(x, "fc3", 8, 1024)
