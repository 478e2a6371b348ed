"""A run's final models as a file (``save_models: final``): ``models.npz`` in the run directory.

Each device's model as it was last scored, so it can be scored again afterwards (robot policies on fresh
rollouts, another gripper command, more episodes) without training it again. States that are equal
bit for bit (every device of a FedAvg run ends with the server's model) are written once:

    state<k>.<name>   the k-th distinct state's entry ``name`` (numpy arrays, their dtypes kept)
    device_model      int64 (devices,): the state each device was last scored with; -1: never scored
    device_round      int64 (devices,): the round of that scoring; -1: never scored, or scored outside a round

Read with ``load_models``: ``np.load`` without pickles, the members' sizes checked before any is read.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from p2pfl.errors import DataError

__all__ = ["SavedModels", "state_arrays", "pack_models", "load_models", "MODELS_FILE", "MAX_MODELS_BYTES"]

MODELS_FILE = "models.npz"
#: the most bytes ``load_models`` reads out of one file (its members as stored uncompressed)
MAX_MODELS_BYTES = 4 << 30


def state_arrays(state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A model's state dict as numpy copies (what ``pack_models`` writes)."""
    return {name: value.detach().cpu().numpy().copy() for name, value in state.items()}


def pack_models(last: Mapping[int, tuple[Optional[int], dict[str, np.ndarray]]], n_devices: int) -> bytes:
    """``models.npz``'s bytes from ``device -> (round, state arrays)`` (each device's last scoring)."""
    arrays: dict[str, np.ndarray] = {}
    index: dict[str, int] = {}
    device_model = np.full(n_devices, -1, dtype=np.int64)
    device_round = np.full(n_devices, -1, dtype=np.int64)
    for device in sorted(last):
        round_, state = last[device]
        digest = hashlib.sha1()
        for name in sorted(state):
            value = np.ascontiguousarray(state[name])
            digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
            digest.update(value.tobytes())
        key = digest.hexdigest()
        if key not in index:  # a state not written yet
            index[key] = len(index)
            arrays.update({f"state{index[key]}.{name}": value for name, value in state.items()})
        device_model[device] = index[key]
        device_round[device] = -1 if round_ is None else round_
    buf = io.BytesIO()
    members: dict[str, Any] = {"device_model": device_model, "device_round": device_round, **arrays}
    np.savez_compressed(buf, **members)
    return buf.getvalue()


@dataclass(frozen=True)
class SavedModels:
    """``models.npz`` read back: the distinct states, and per device which one and from which round."""

    states: tuple[dict[str, torch.Tensor], ...]
    device_model: np.ndarray
    device_round: np.ndarray

    def of(self, device: int) -> Optional[dict[str, torch.Tensor]]:
        """The state ``device`` was last scored with (None: never scored)."""
        k = int(self.device_model[device])
        return None if k < 0 else self.states[k]


def _declared_bytes(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """The bytes of the array an npz member's header declares (read before the array is)."""
    with z.open(info) as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def load_models(path: str | Path) -> SavedModels:
    """Read a ``models.npz`` (one-line ``DataError`` for anything else)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
            declared = [_declared_bytes(z, info) for info in members]
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: not a models file ({err}); write one with save_models: final") from None
    stored = sum(info.file_size for info in members)
    if stored > MAX_MODELS_BYTES:
        raise DataError(f"{path}: {stored} bytes of models, over the {MAX_MODELS_BYTES} this reader takes")
    for info, size in zip(members, declared):  # no array larger than its member: nothing allocated blind
        if size > info.file_size:
            raise DataError(f"{path}: entry {info.filename!r} declares {size} bytes and holds {info.file_size}")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {name: z[name] for name in z.files}
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a models file ({err}); write one with save_models: final") from None
    device_model, device_round = data.pop("device_model", None), data.pop("device_round", None)
    if device_model is None or device_round is None or device_model.shape != device_round.shape:
        raise DataError(f"{path}: not a models file (no device_model and device_round of one length)")
    states: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in data.items():
        head, _, name = key.partition(".")
        if not head.startswith("state") or not head[5:].isdigit() or not name:
            raise DataError(f"{path}: unexpected entry {key!r} (expected state<k>.<name>)")
        states.setdefault(int(head[5:]), {})[name] = torch.from_numpy(value)
    if sorted(states) != list(range(len(states))) or int(device_model.max(initial=-1)) >= len(states):
        raise DataError(f"{path}: its devices name states it does not hold")
    return SavedModels(tuple(states[k] for k in range(len(states))), device_model, device_round)
