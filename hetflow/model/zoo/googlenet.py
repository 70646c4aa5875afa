"""GoogLeNet (Inception v1) as torchvision builds it, without the auxiliary heads.

torchvision's BasicConv2d is Conv (no bias) + BatchNorm (eps 0.001) + ReLU. Its "5x5" branch uses
a 3x3 kernel (a known quirk kept for its pretrained weights, pytorch/vision#906); it is kept
here so that shapes and the 6,624,904 parameters match torchvision. No input transform
(transform_input is False without pretrained weights).
"""
from __future__ import annotations

from hetflow.model.zoo.builder import GraphBuilder, Tensor

# name -> (1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool proj), as in torchvision
INCEPTIONS = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}
POOL_AFTER = {"inception3b": ("maxpool3", 3), "inception4e": ("maxpool4", 2)}


def basic_conv(b: GraphBuilder, x: Tensor, name: str, out: int, kernel: int, stride: int = 1,
               pad: int = 0) -> Tensor:
    x = b.conv(x, f"{name}.conv", out, kernel, stride, pad, bias=False)
    return b.relu(b.batch_norm(x, f"{name}.bn", eps=1e-3), f"{name}.relu")


def inception(b: GraphBuilder, x: Tensor, name: str, c1: int, c3r: int, c3: int, c5r: int,
              c5: int, proj: int) -> Tensor:
    b1 = basic_conv(b, x, f"{name}.branch1", c1, 1)
    b2 = basic_conv(b, basic_conv(b, x, f"{name}.branch2.0", c3r, 1), f"{name}.branch2.1",
                    c3, 3, pad=1)
    b3 = basic_conv(b, basic_conv(b, x, f"{name}.branch3.0", c5r, 1), f"{name}.branch3.1",
                    c5, 3, pad=1)
    pool = b.max_pool(x, f"{name}.branch4.0", 3, 1, pad=1, ceil_mode=True)
    b4 = basic_conv(b, pool, f"{name}.branch4.1", proj, 1)
    return b.concat([b1, b2, b3, b4], f"{name}.cat")


def googlenet(b: GraphBuilder, x: Tensor) -> Tensor:
    x = basic_conv(b, x, "conv1", 64, 7, stride=2, pad=3)
    x = b.max_pool(x, "maxpool1", 3, 2, ceil_mode=True)
    x = basic_conv(b, x, "conv2", 64, 1)
    x = basic_conv(b, x, "conv3", 192, 3, pad=1)
    x = b.max_pool(x, "maxpool2", 3, 2, ceil_mode=True)
    assert x.shape == (1, 192, 28, 28), x.shape
    for name, channels in INCEPTIONS.items():
        x = inception(b, x, name, *channels)
        if name in POOL_AFTER:
            pool, kernel = POOL_AFTER[name]
            x = b.max_pool(x, pool, kernel, 2, ceil_mode=True)
    assert x.shape == (1, 1024, 7, 7), x.shape
    x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten")
    return b.gemm(x, "fc", 1000, 1024)
