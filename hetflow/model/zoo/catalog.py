"""The zoo's table of contents: one entry per model, with its builder and the papers' name."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hetflow.model.zoo import classic, densenet, fer, googlenet, mobilenet, resnet, yolo
from hetflow.model.zoo.builder import GraphBuilder, Tensor

# Bump when any architecture or the weight generator changes: cached files carry it in their name.
ZOO_VERSION = "1"

BuildFn = Callable[[GraphBuilder, Tensor], Tensor]


@dataclass(frozen=True)
class ZooEntry:
    """A model the zoo can build. `paper_name` is the name in the papers' tables, if any."""

    name: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    description: str
    paper_name: str | None


_IMAGENET_IN, _IMAGENET_OUT = (1, 3, 224, 224), (1, 1000)

_ENTRIES: list[tuple[ZooEntry, BuildFn]] = [
    (ZooEntry("alexnet", _IMAGENET_IN, _IMAGENET_OUT,
              "AlexNet (torchvision): 5 conv + 3 fully connected, 61.1 M parameters",
              "bvlc_alexnet"), classic.alexnet),
    (ZooEntry("vgg19", _IMAGENET_IN, _IMAGENET_OUT,
              "VGG-19 without BN (torchvision): 16 conv + 3 fully connected, 143.7 M parameters",
              "VGG_19"), classic.vgg19),
    (ZooEntry("googlenet", _IMAGENET_IN, _IMAGENET_OUT,
              "GoogLeNet / Inception v1 (torchvision, BN, no aux heads): 9 inception modules",
              "bvlc_googlenet"), googlenet.googlenet),
    (ZooEntry("tiny_yolo_v2", (1, 3, 416, 416), (1, 125, 13, 13),
              "Tiny YOLO v2 (VOC): 9 conv with BN + LeakyReLU(0.1), 13x13 grid of 5 x 25 values",
              "tiny_yolo_v2"), yolo.tiny_yolo_v2),
    (ZooEntry("resnet18", _IMAGENET_IN, _IMAGENET_OUT,
              "ResNet-18 (torchvision): 8 basic residual blocks", "resnet18"), resnet.resnet18),
    (ZooEntry("resnet50", _IMAGENET_IN, _IMAGENET_OUT,
              "ResNet-50 v1.5 (torchvision): 16 bottleneck residual blocks", "ResNet50"),
     resnet.resnet50),
    (ZooEntry("densenet121", _IMAGENET_IN, _IMAGENET_OUT,
              "DenseNet-121 (torchvision): 4 dense blocks (6, 12, 24, 16 layers), growth 32",
              "densenet121"), densenet.densenet121),
    (ZooEntry("emotion_ferplus", (1, 1, 64, 64), (1, 8),
              "Emotion FER+: VGG-like, 10 conv + 3 fully connected, 8 emotion scores",
              "Emotion FER"), fer.emotion_ferplus),
    (ZooEntry("mobilenet_v1", _IMAGENET_IN, _IMAGENET_OUT,
              "MobileNet v1 (Keras reference, alpha 1.0): 13 depthwise-separable blocks, ReLU6",
              "MobileNet v1"), mobilenet.mobilenet_v1),
    (ZooEntry("mobilenet_v2", _IMAGENET_IN, _IMAGENET_OUT,
              "MobileNet v2 (torchvision): 17 inverted residual blocks, ReLU6",
              "MobileNet v2"), mobilenet.mobilenet_v2),
    (ZooEntry("squeezenet1_0", _IMAGENET_IN, _IMAGENET_OUT,
              "SqueezeNet 1.0 (torchvision): 8 fire modules, conv classifier", "SqueezeNet"),
     classic.squeezenet1_0),
]

CATALOG: dict[str, tuple[ZooEntry, BuildFn]] = {e.name: (e, fn) for e, fn in _ENTRIES}

# Other names of the same architectures (the papers list bvlc_googlenet and inception_v1, two
# ONNX zoo exports of the same network).
ALIASES = {"inception_v1": "googlenet", "fer_plus": "emotion_ferplus"}
