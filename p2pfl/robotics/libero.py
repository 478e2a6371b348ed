"""LIBERO adapter: real LIBERO tasks through the ``libero`` package's benchmark API (optional).

Demo files of LIBERO load through ``p2pfl.robotics.demos.read_demo_file`` (same layout as ours).
For rollouts, ``libero_env_factory`` builds ``OffScreenRenderEnv`` instances of a LIBERO suite
task and wraps them in our env interface (reset(seed) / step(action) / obs / success). Install:
see README "Robotics" (LIBERO from its git repository; robosuite 1.4 needs mujoco < 4).
Task ids are ``<suite>/<demo file stem>``, e.g. ``libero_object/pick_up_the_ketchup_and_place_it_in_the_basket``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from p2pfl.errors import DataError
from p2pfl.robotics.gl import require_gl

__all__ = ["libero_available", "libero_env_factory", "LiberoEnv"]


def libero_available() -> str | None:
    """None when ``libero`` imports; otherwise why not."""
    try:
        from libero.libero import benchmark  # noqa: F401
    except Exception as err:  # pragma: no cover - depends on the user's install
        return f"{type(err).__name__}: {err}"
    return None


@dataclass
class _Task:
    instruction: str


class LiberoEnv:
    """One LIBERO task with our interface; observations resized to ``image`` px."""

    def __init__(self, suite: str, task_name: str, image: int) -> None:  # pragma: no cover - needs LIBERO
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        bench = benchmark.get_benchmark_dict()[suite]()
        names = [t.name for t in bench.tasks]
        if task_name not in names:
            raise DataError(f"LIBERO suite {suite!r} has no task {task_name!r}; tasks: {', '.join(names)}")
        i = names.index(task_name)
        t = bench.get_task(i)
        bddl = os.path.join(get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)
        self.env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=128, camera_widths=128)
        self.init_states = bench.get_task_init_states(i)
        self.task = _Task(t.language)
        self.image = image
        self._done = False

    def _obs(self, o: dict) -> dict:  # pragma: no cover - needs LIBERO
        import torch

        img = torch.from_numpy(np.ascontiguousarray(o["agentview_image"])).permute(2, 0, 1)[None].float()
        img = torch.nn.functional.interpolate(img, size=(self.image, self.image), mode="area")[0].permute(1, 2, 0)
        return {"agentview_rgb": img.round().clamp(0, 255).byte().numpy(),
                "joint_states": np.asarray(o["robot0_joint_pos"], np.float32),
                "gripper_states": np.asarray(o["robot0_gripper_qpos"], np.float32)}

    def reset(self, seed: int) -> dict:  # pragma: no cover - needs LIBERO
        self.env.seed(seed)
        self.env.reset()
        o = self.env.set_init_state(self.init_states[seed % len(self.init_states)])
        for _ in range(5):  # LIBERO's settling steps
            o, _, _, _ = self.env.step(np.zeros(7))
        self._done = False
        return self._obs(o)

    def step(self, action: np.ndarray):  # pragma: no cover - needs LIBERO
        o, _, done, _ = self.env.step(np.asarray(action, dtype=np.float64))
        self._done = bool(done)

        @dataclass
        class Info:
            success: bool

        return self._obs(o), Info(self._done)


@dataclass(frozen=True)
class LiberoEnvFactory:
    """``make_env(task_id)`` for rollouts (picklable: rollouts may run in a worker process)."""

    image: int

    def __call__(self, tid: str) -> LiberoEnv:
        return LiberoEnv(tid.split("/", 1)[0], tid.split("/", 1)[1], self.image)


def libero_env_factory(image: int) -> Callable[[str], LiberoEnv]:
    """``make_env(task_id)`` for rollouts; task ids are ``<libero suite>/<task name>``."""
    require_gl()  # robosuite renders with MuJoCo too: same backend check, triton loaded first
    reason = libero_available()
    if reason is not None:
        raise DataError(f"data.partition.source: libero needs the 'libero' package ({reason}); see README 'Robotics'")
    return LiberoEnvFactory(image)
