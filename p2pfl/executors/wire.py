"""How a job or its outcome travels to another process: one pickle plus one flat tensor buffer.

Tensors are taken out of the pickle stream (``persistent_id``) and laid end to
end in one byte buffer, so a model travels as its flat state; tensors that the
executor has shared (data shards in shared memory or Ray's object store) travel
as a key only. Only this package's own processes read these messages: they are
never written to disk and never read from anyone else.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["Packed", "pack", "unpack"]

#: (pickle bytes, tensor buffer)
Packed = tuple[bytes, bytes]


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: Mapping[int, str]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared
        self.chunks: list[memoryview] = []
        self.offset = 0

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor):
            return None
        key = self.shared.get(id(obj))
        if key is not None:
            return ("shared", key)
        t = obj.detach()
        if t.device.type != "cpu":
            raise ValueError("jobs for other processes hold CPU tensors only; use executor: inline on an accelerator")
        flat = t.contiguous().reshape(-1).view(torch.uint8)
        nbytes = flat.numel()
        self.chunks.append(memoryview(flat.numpy().data))
        ref = ("tensor", self.offset, nbytes, str(t.dtype).removeprefix("torch."), tuple(t.shape),
               isinstance(obj, nn.Parameter), obj.requires_grad)
        self.offset += nbytes
        return ref


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffer: bytearray, shared: Mapping[str, torch.Tensor]) -> None:
        super().__init__(file)
        self.buffer = buffer
        self.shared = shared

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "shared":
            return self.shared[pid[1]]
        _, offset, nbytes, dtype, shape, is_param, requires_grad = pid
        raw = torch.frombuffer(self.buffer, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        t = raw.view(getattr(torch, dtype)).reshape(shape)
        if is_param:
            return nn.Parameter(t, requires_grad=requires_grad)
        return t.requires_grad_(requires_grad) if requires_grad else t


def pack(obj: Any, shared: Mapping[int, str] | None = None) -> Packed:
    """``obj`` as (pickle, tensor buffer); tensors whose ``id`` is in ``shared`` travel as their key."""
    f = io.BytesIO()
    p = _Pickler(f, shared or {})
    p.dump(obj)
    return f.getvalue(), b"".join(p.chunks)


def unpack(packed: Packed, shared: Mapping[str, torch.Tensor] | None = None) -> Any:
    """The object ``pack`` wrote; its tensors are views of one writable copy of the buffer."""
    data, buffer = packed
    return _Unpickler(io.BytesIO(data), bytearray(buffer), {} if shared is None else shared).load()
