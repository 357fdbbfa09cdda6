"""CNN models for the cnn-train / cnn-infer workloads, in plain torch.nn (no torchvision here).

- `resnet50`: the torchvision ResNet-50 architecture (v1.5: the stride sits in the 3×3 conv of each
  bottleneck), Bottleneck blocks [3, 4, 6, 3], 25,557,032 parameters for 1000 classes, torchvision's
  initialisation (Kaiming-normal fan-out convs, BatchNorm γ=1 β=0, no zero-init of the last BN).
- `small`: a 4-block ResNet for quick runs: a 3×3 stem (32 channels), then basic residual blocks
  32→32, 32→64, 64→128, 128→256 (strides 1, 2, 2, 2), global average pool, linear classifier;
  1,228,970 parameters for 10 classes (1,483,400 for 1000).
"""

from __future__ import annotations

import torch
from torch import nn

MODELS = ("resnet50", "small")


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


def _init_weights(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.constant_(module.weight, 1.0)
            nn.init.constant_(module.bias, 0.0)


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with a residual connection (1×1 projection when the shape changes)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(_conv1x1(in_planes, planes, stride), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out: torch.Tensor = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 (carrying the stride), 1×1 expand ×4; torchvision's ResNet-50 block."""

    expansion = 4

    def __init__(
        self, in_planes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(in_planes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out: torch.Tensor = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class ResNet50(nn.Module):
    """torchvision.models.resnet50(weights=None), rebuilt: the same modules, shapes and parameter count."""

    def __init__(self, num_classes: int = 1000, layers: tuple[int, ...] = (3, 4, 6, 3)) -> None:
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0], stride=1)
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        _init_weights(self)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample: nn.Module | None = None
        out_planes = planes * Bottleneck.expansion
        if stride != 1 or self.in_planes != out_planes:
            downsample = nn.Sequential(
                _conv1x1(self.in_planes, out_planes, stride), nn.BatchNorm2d(out_planes)
            )
        modules: list[nn.Module] = [Bottleneck(self.in_planes, planes, stride, downsample)]
        self.in_planes = out_planes
        modules += [Bottleneck(self.in_planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = torch.flatten(self.avgpool(out), 1)
        logits: torch.Tensor = self.fc(out)
        return logits


class SmallResNet(nn.Module):
    """A 4-block ResNet (stem, basic blocks 32→64→128→256) that trains in milliseconds per step on a CPU."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv3x3(3, 32), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(
            BasicBlock(32, 32, stride=1),
            BasicBlock(32, 64, stride=2),
            BasicBlock(64, 128, stride=2),
            BasicBlock(128, 256, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(256, num_classes)
        _init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.blocks(self.stem(x))
        out = torch.flatten(self.avgpool(out), 1)
        logits: torch.Tensor = self.fc(out)
        return logits


def build_model(name: str, num_classes: int) -> nn.Module:
    """The named model, freshly initialised from torch's current RNG state."""
    if name == "resnet50":
        return ResNet50(num_classes)
    if name == "small":
        return SmallResNet(num_classes)
    raise ValueError(f"unknown model {name!r} (models: {', '.join(MODELS)})")


def count_parameters(model: nn.Module) -> int:
    return sum(int(p.numel()) for p in model.parameters())


FORWARD_FLOPS_FORMULA = (
    "torch.utils.flop_counter.FlopCounterMode over one forward pass of one image (batch 1, on the meta "
    "device): 2 FLOP per multiply-add of every convolution and matmul (the linear classifier); batch "
    "norm, ReLU, pooling, the residual adds and the loss are not counted"
)


def forward_flops_per_image(model: nn.Module, image_size: int) -> int:
    """Model FLOPs of one image's forward pass, counted by torch's own FLOP counter, not by a formula of
    ours: a copy of the model on the meta device (shapes only, no arithmetic, so counting ResNet-50 costs
    milliseconds). Convolutions and matmuls scale with the batch, so per-image × batch is the step's
    count."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    meta = copy.deepcopy(model).to("meta").eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        meta(torch.empty(1, 3, image_size, image_size, device="meta"))
    return int(counter.get_total_flops())
