"""Tiny YOLO v2 (VOC: 20 classes x 5 anchors -> 125 channels on a 13x13 grid).

The structure of `tiny_yolo_v2()` in shared/anchors/anchor_bench.py: six conv(3x3, no bias)-BN-
LeakyReLU(0.1) blocks, each followed by a 2x2 max pool of stride 2, except the sixth, whose pool
has stride 1 after a one-pixel zero pad on the right and bottom (a Pad node) so the grid stays
13x13; then two 1024-channel blocks and a 1x1 conv with bias to 125 channels.
Names are darknet-like: `conv1`, `bn1`, `leaky1`, `pool1`, ...
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor


def _conv_bn_leaky(b: GraphBuilder, x: Tensor, i: int, out: int) -> Tensor:
    x = b.batch_norm(b.conv(x, f"conv{i}", out, 3, pad=1, bias=False), f"bn{i}")
    return b.leaky_relu(x, f"leaky{i}", alpha=0.1)


def tiny_yolo_v2(b: GraphBuilder, x: Tensor) -> Tensor:
    for i, out in enumerate([16, 32, 64, 128, 256, 512], start=1):
        x = _conv_bn_leaky(b, x, i, out)
        if i < 6:
            x = b.max_pool(x, f"pool{i}", 2, 2)
        else:
            x = b.max_pool(b.pad(x, f"pad{i}", 0, 0, 1, 1), f"pool{i}", 2, 1)
    assert x.shape == (1, 512, 13, 13), x.shape
    x = _conv_bn_leaky(b, _conv_bn_leaky(b, x, 7, 1024), 8, 1024)
    return b.conv(x, "conv9", 125, 1)
