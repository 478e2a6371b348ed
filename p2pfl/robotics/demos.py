"""Demonstrations in LIBERO's hdf5 layout: writer, reader (real LIBERO files too), cache, expert runs.

Layout (as LIBERO's ``*_demo.hdf5``)::

    data                       attrs: problem_info (JSON with "language_instruction"), env_name, ...
    data/demo_i                attrs: num_samples
    data/demo_i/actions        (T, A) float
    data/demo_i/obs/agentview_rgb   (T, H, W, 3) uint8
    data/demo_i/obs/eye_in_hand_rgb (T, H, W, 3) uint8   (LIBERO's files; read only when asked)
    data/demo_i/obs/joint_states    (T, J)
    data/demo_i/obs/gripper_states  (T, G)
    data/demo_i/dones, rewards      (T,)

Generated demos are cached under ``~/.cache/p2pfl/robotics`` (or a chosen root), one file per task.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from p2pfl.errors import DataError

__all__ = ["Demo", "DemoFile", "write_demo_file", "read_demo_file", "generate_demos", "task_demos", "DEFAULT_ROOT",
           "CACHE_VERSION"]

DEFAULT_ROOT = "~/.cache/p2pfl/robotics"
CACHE_VERSION = "v4"


@dataclass
class Demo:
    """One trajectory: images (T, H, W, 3) uint8, joint (T, J), gripper (T, G), actions (T, A);
    the wrist camera's images (T, H, W, 3) where read."""

    agentview_rgb: np.ndarray
    joint_states: np.ndarray
    gripper_states: np.ndarray
    actions: np.ndarray
    eye_in_hand_rgb: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.actions.shape[0])


@dataclass
class DemoFile:
    """All demos of one task and its language instruction."""

    instruction: str
    demos: list[Demo]
    attrs: dict


def _import_h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover
        raise DataError("reading or writing robot demonstrations needs h5py; pip install 'p2pfl-sim[robotics]'") from None
    return h5py


def write_demo_file(path: str | Path, instruction: str, demos: list[Demo], attrs: Optional[dict] = None) -> None:
    """Write ``demos`` in LIBERO's layout (atomically: temp file then rename)."""
    h5py = _import_h5py()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with h5py.File(tmp, "w") as f:
        g = f.create_group("data")
        info = {"problem_name": (attrs or {}).get("task", ""), "domain_name": "p2pfl", "language_instruction": instruction}
        g.attrs["problem_info"] = json.dumps(info)
        g.attrs["env_name"] = (attrs or {}).get("env_name", "p2pfl")
        for k, v in (attrs or {}).items():
            g.attrs[k] = v
        total = 0
        for i, d in enumerate(demos):
            dg = g.create_group(f"demo_{i}")
            dg.attrs["num_samples"] = len(d)
            dg.create_dataset("actions", data=d.actions.astype(np.float64))
            og = dg.create_group("obs")
            og.create_dataset("agentview_rgb", data=d.agentview_rgb.astype(np.uint8), compression="gzip", compression_opts=4)
            og.create_dataset("joint_states", data=d.joint_states.astype(np.float64))
            og.create_dataset("gripper_states", data=d.gripper_states.astype(np.float64))
            dones = np.zeros(len(d), np.uint8)
            dones[-1] = 1
            dg.create_dataset("dones", data=dones)
            dg.create_dataset("rewards", data=dones.astype(np.float64))
            total += len(d)
        g.attrs["total"] = total
    os.replace(tmp, path)


def _demo_index(name: str) -> int:
    m = re.fullmatch(r"demo_(\d+)", name)
    return int(m.group(1)) if m else -1


def read_demo_file(path: str | Path, max_demos: Optional[int] = None, *, wrist: bool = False) -> DemoFile:
    """Read a LIBERO-layout demo file (ours or LIBERO's own); demos in numeric order.

    ``wrist``: also read each demo's ``obs/eye_in_hand_rgb`` (one-line error where a demo lacks it).
    Actions are a demo's ``expert_actions`` where it has them (demos recorded with noise injection: the
    expert's labels, not the noisy actions executed), else its ``actions``.
    """
    h5py = _import_h5py()
    path = Path(path)
    if not path.is_file():
        raise DataError(f"demo file {str(path)!r} not found")
    with h5py.File(path, "r") as f:
        if "data" not in f:
            raise DataError(f"{path}: no 'data' group; not a LIBERO demo file")
        g = f["data"]
        try:
            instruction = json.loads(g.attrs["problem_info"])["language_instruction"]
        except (KeyError, ValueError, TypeError):
            raise DataError(f"{path}: data.attrs['problem_info'] lacks 'language_instruction'") from None
        if isinstance(instruction, list):  # some LIBERO files store it as a list of words
            instruction = " ".join(instruction)
        names = sorted((k for k in g if _demo_index(k) >= 0), key=_demo_index)[:max_demos]
        demos = []
        for k in names:
            o = g[k]["obs"]
            if wrist and "eye_in_hand_rgb" not in o:
                raise DataError(f"{path}: {k} has no obs/eye_in_hand_rgb; set data.partition.wrist: false")
            demos.append(Demo(np.asarray(o["agentview_rgb"], dtype=np.uint8), np.asarray(o["joint_states"], np.float32),
                              np.asarray(o["gripper_states"], np.float32),
                              np.asarray(g[k]["expert_actions" if "expert_actions" in g[k] else "actions"], np.float32),
                              np.asarray(o["eye_in_hand_rgb"], dtype=np.uint8) if wrist else None))
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
    return DemoFile(str(instruction), demos, attrs)


def generate_demos(task_id: str, n: int, *, seed: int = 0, horizon: int = 80) -> tuple[list[Demo], float]:
    """Run the scripted expert ``n`` times from seeded initial poses; (successful demos, success rate).

    Episode i uses layout seed ``seed * 100003 + i``; failures are retried with fresh seeds.
    """
    from p2pfl.robotics.env import Expert, RobotEnv
    from p2pfl.robotics.suites import get_task

    env = RobotEnv(get_task(task_id))
    demos: list[Demo] = []
    tries = 0
    while len(demos) < n:
        if tries > 3 * n + 10:
            raise RuntimeError(f"expert for {task_id} fails too often ({len(demos)}/{tries})")
        ep_seed = seed * 100003 + tries
        obs = env.reset(ep_seed)
        ex = Expert(env, np.random.default_rng(ep_seed))
        frames, joints, grips, acts = [], [], [], []
        ok = False
        for _ in range(horizon):
            a = ex.act()
            frames.append(obs["agentview_rgb"])
            joints.append(obs["joint_states"])
            grips.append(obs["gripper_states"])
            acts.append(a)
            obs, info = env.step(a)
            if info.success:
                ok = True
                break
        tries += 1
        if ok:
            demos.append(Demo(np.stack(frames), np.stack(joints), np.stack(grips), np.stack(acts)))
    return demos, len(demos) / tries


def task_demos(task_id: str, n: int, root: Optional[str] = None) -> DemoFile:
    """``n`` demos of a generated task, from the cache (written on first use)."""
    from p2pfl.robotics.suites import IMAGE_SIZE, get_task

    task = get_task(task_id)
    base = Path(os.path.expanduser(root or DEFAULT_ROOT)) / f"p2pfl-sim-{CACHE_VERSION}-{IMAGE_SIZE}px"
    path = base / task.suite / f"{task.name}_demo.hdf5"
    if path.is_file():
        df = read_demo_file(path)
        if len(df.demos) >= n:
            df.demos = df.demos[:n]
            return df
    demos, rate = generate_demos(task_id, n)
    write_demo_file(path, task.instruction, demos, {"task": task_id, "env_name": f"p2pfl/{task.suite}",
                                                    "expert_success_rate": rate})
    return read_demo_file(path)
