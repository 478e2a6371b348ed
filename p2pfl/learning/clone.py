"""A fast copy of a plain PyTorch module (the common initial model, once per device).

``copy.deepcopy`` walks every attribute through its memo; a module built of
parameters, buffers, submodules and plain settings needs far less. Anything
else (tensors or containers in ordinary attributes, registered hooks, tied
weights) falls back to ``copy.deepcopy``, so the copy is always a true one.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Optional

import torch
from torch import nn

__all__ = ["clone_module", "is_plain"]

_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device)
_CONTAINERS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


def clone_module(module: nn.Module) -> nn.Module:
    """An independent copy of ``module`` (same values, new tensors)."""
    seen: set[int] = set()
    fast = _clone(module, seen)
    return fast if fast is not None else copy.deepcopy(module)


def is_plain(module: nn.Module) -> bool:
    """Whether every submodule holds only parameters, buffers in its state dict, submodules and plain
    settings: so its state dict is all that distinguishes two copies (what stacking needs)."""
    for m in module.modules():
        if m._non_persistent_buffers_set:
            return False
        for key, value in m.__dict__.items():
            if key in _CONTAINERS or _is_hooks(key):
                if _is_hooks(key) and value:
                    return False
            elif not _plain(value):
                return False
    return True


@functools.lru_cache(maxsize=4096)  # the same few attribute names, asked for every module of every copy
def _is_hooks(key: str) -> bool:
    return key.endswith(("hooks", "hooks_with_kwargs")) or key == "_forward_hooks_always_called"


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)


def _clone(module: nn.Module, seen: set[int]) -> Optional[nn.Module]:
    """The copy, or None when ``module`` holds anything but the plain parts."""
    new = object.__new__(type(module))
    d: dict[str, Any] = {}
    for key, value in module.__dict__.items():
        if key in _CONTAINERS:
            continue
        if _is_hooks(key):
            if value:  # a registered hook: let deepcopy decide
                return None
            d[key] = type(value)()
        elif _plain(value):
            d[key] = value
        else:
            return None
    params: dict[str, Optional[nn.Parameter]] = {}
    for key, p in module._parameters.items():
        if p is not None:
            if id(p) in seen:
                return None  # tied weights
            seen.add(id(p))
            params[key] = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
        else:
            params[key] = None
    buffers = {key: (b.detach().clone() if b is not None else None) for key, b in module._buffers.items()}
    children: dict[str, Optional[nn.Module]] = {}
    for key, child in module._modules.items():
        if child is None:
            children[key] = None
            continue
        c = _clone(child, seen)
        if c is None:
            return None
        children[key] = c
    d.update(_parameters=params, _buffers=buffers, _modules=children,
             _non_persistent_buffers_set=set(module._non_persistent_buffers_set))
    new.__dict__.update(d)
    return new
