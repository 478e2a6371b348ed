"""Model zoo. Names follow the papers.

``cnn28`` is the Conditional paper's 28x28 backbone (Sec. III-B) without the
statistics concatenation: Conv(1->32, 3x3, pad 1) - ReLU - MaxPool(2) -
Conv(32->64, 3x3, pad 1) - ReLU - MaxPool(2) - Flatten(3136) - FC(128) - ReLU -
FC(C). ``cnn32`` is its 32x32 RGB backbone (Sec. III-B, Eq. 3): two blocks of
two Conv(3x3, pad 1) - BatchNorm - ReLU (32 then 64 channels), each followed by
MaxPool(2) - Flatten(4096) - FC(256) - ReLU - FC(C). ``mlp`` is a small
multilayer perceptron for 8x8 digits or vector data.

Other models come from plug-ins (entry-point group ``p2pfl.models``, see ``p2pfl.plugins``; robotics'
``robot_policy`` is one) or are named ``package.module:function`` in YAML. Either is a function
``(input_shape, num_classes, **options) -> nn.Module``, also given ``hint=`` where the data describe
their samples beyond the input shape (``Federation.model_hint``).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import torch
from pydantic import Field, field_validator, model_validator
from torch import nn

from p2pfl import limits
from p2pfl.errors import ConfigError
from p2pfl.plugins import GROUPS, import_object, lookup, registered
from p2pfl.validation import Strict

__all__ = ["ModelSpec", "CNN28", "CNN32", "MLP", "MODELS", "build_model", "resolve_model_name"]


BUILTIN_MODELS = ("auto", "cnn28", "cnn32", "mlp")


def _plugin_models() -> dict[str, str]:
    """Models of plug-ins: name -> ``module:function`` (nothing imported)."""
    return {k: v for k, v in registered(GROUPS["models"]).items() if k not in BUILTIN_MODELS}


def _plugin_target(name: str) -> str:
    target = lookup(GROUPS["models"], name)
    if target is None:
        raise ConfigError(f"model.name {name!r} is no longer registered by a plug-in ({GROUPS['models']})")
    return target


class ModelSpec(Strict):
    """YAML ``model:`` block. ``auto`` picks the dataset's own model where it names one (robotics:
    ``robot_policy``), ``cnn28`` for 28x28 images, ``cnn32`` for 3x32x32 images, else ``mlp``.

    ``name: package.module:function`` builds a user model, and a plug-in's model name its function:
    ``function(input_shape, num_classes, **options)`` must return an ``nn.Module`` (its weights are
    drawn under the run's seed). A function with a ``check_options(options)`` attribute has ``options`` checked
    when the scenario loads (it raises ``ValueError`` with a one-line reason).
    """

    name: str = "auto"
    hidden: int = Field(64, ge=1, le=limits.MAX_HIDDEN, description="hidden width of 'mlp'")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of a user model")

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v in BUILTIN_MODELS:
            return v
        if ":" not in v:
            if lookup(GROUPS["models"], v) is not None:
                return v
            raise ValueError(f"unknown model {v!r}; use one of {', '.join([*BUILTIN_MODELS, *_plugin_models()])} "
                             "or 'package.module:function' for your own")
        _user_builder(v)
        return v

    @model_validator(mode="after")
    def _options_for_user_models(self) -> ModelSpec:
        if self.options and self.name in BUILTIN_MODELS:
            raise ValueError(f"model.options is for user models ('package.module:function') and plug-in models; "
                             f"remove it for model {self.name!r}")
        if self.options:  # a builder may check its options when the scenario loads: ``fn.check_options(options)``
            fn = _user_builder(self.name if ":" in self.name else _plugin_target(self.name))
            check = getattr(fn, "check_options", None)
            if callable(check):
                check(self.options)  # ValueError, one line
        return self


def _user_builder(target: str) -> Callable[..., nn.Module]:
    """The function named ``package.module:function``; ValueError (one line) when it cannot be found."""
    fn = import_object(target)
    if not callable(fn):
        raise ValueError(f"{target!r} is not a function; name a function of (input_shape, num_classes)")
    return fn

class CNN28(nn.Module):
    """Conditional paper Sec. III-B backbone for 1x28x28 inputs."""

    def __init__(self, num_classes: int, in_channels: int = 1, hidden: int = 128) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(nn.Linear(3136, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]


class CNN32(nn.Module):
    """Conditional paper Sec. III-B (Eq. 3) backbone for 3x32x32 inputs (CIFAR-10/100).

    BatchNorm buffers are in the state dict: FedAvg averages the running mean and
    variance (float) and keeps ``num_batches_tracked`` (integer) from the first state.
    """

    def __init__(self, num_classes: int, in_channels: int = 3, hidden: int = 256) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv_bn_relu(in_channels, 32), *_conv_bn_relu(32, 32), nn.MaxPool2d(2),
            *_conv_bn_relu(32, 64), *_conv_bn_relu(64, 64), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(nn.Linear(4096, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class MLP(nn.Module):
    """Flatten - FC(hidden) - ReLU - FC(C)."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _cnn28(spec: ModelSpec, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    if tuple(input_shape[-2:]) != (28, 28) or len(input_shape) != 3:
        raise ConfigError(f"model.name 'cnn28' needs 28x28 images; got input shape {tuple(input_shape)}; use 'mlp'")
    return CNN28(num_classes, in_channels=input_shape[0])


def _cnn32(spec: ModelSpec, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    if tuple(input_shape[-2:]) != (32, 32) or len(input_shape) != 3:
        raise ConfigError(f"model.name 'cnn32' needs 32x32 images; got input shape {tuple(input_shape)}; use 'mlp'")
    return CNN32(num_classes, in_channels=input_shape[0])


def _mlp(spec: ModelSpec, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return MLP(prod(input_shape), num_classes, hidden=spec.hidden)


MODELS: dict[str, Callable[[ModelSpec, tuple[int, ...], int], nn.Module]] = {"cnn28": _cnn28, "cnn32": _cnn32, "mlp": _mlp}


def resolve_model_name(name: str, input_shape: tuple[int, ...], *, default: str | None = None) -> str:
    """``auto`` -> ``default`` (the dataset's own model, ``DatasetInfo.model``) where given, else ``cnn28`` for
    28x28 images, ``cnn32`` for 3x32x32, else ``mlp``."""
    if name != "auto":
        return name
    if default is not None:
        return default
    shape = tuple(input_shape)
    return "cnn28" if len(shape) == 3 and shape[-2:] == (28, 28) else "cnn32" if shape == (3, 32, 32) else "mlp"


def build_model(spec: ModelSpec, input_shape: tuple[int, ...], num_classes: int, *, seed: int,
                hint: object = None) -> nn.Module:
    """A freshly initialised model; the same seed gives the same weights.

    ``num_classes == 0`` means a regression task: one real output. ``hint`` is what a dataset
    tells its model beyond the input shape (robot data: the observation layout), given to user and
    plug-in models as ``hint=`` when not None. ``auto`` here goes by the input shape: a dataset's own model
    (``DatasetInfo.model``) is named in ``spec`` already (the kernel resolves it for the run).
    """
    num_classes = max(num_classes, 1)
    name = resolve_model_name(spec.name, input_shape)
    builder = None if name in MODELS else _user_builder(name if ":" in name else _plugin_target(name))
    with torch.random.fork_rng(devices=[]):
        # Seed only the CPU generator (weights are initialised on the CPU): torch.manual_seed
        # would also queue a CUDA seeding call, which costs ~1 ms per model on large fleets.
        torch.default_generator.manual_seed(seed)
        if builder is None:
            return MODELS[name](spec, tuple(input_shape), num_classes)
        options = dict(spec.options) if hint is None else {**spec.options, "hint": hint}
        model = builder(tuple(input_shape), num_classes, **options)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model.name {name!r} returned {type(model).__name__}, not a torch.nn.Module")
        return model
