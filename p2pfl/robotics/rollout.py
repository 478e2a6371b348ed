"""Closed-loop rollouts: N seeded episodes per task, batched policy steps, success per task (and, where the
environment reports it, progress: the closest the gripper came to the task's object and whether it held it).

The initial poses of evaluation episodes come from seeds disjoint from the demonstrations', the
same for every method, so success rates are comparable. The policy acts by the mean of its most
likely mixture mode (LIBERO's low-noise evaluation); with ``binarize`` its gripper command (the last
action dimension) is sent as +1 or -1 (``binarize_gripper``), as LIBERO's policies act.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from p2pfl.robotics.policy import ObsLayout, pack_samples

__all__ = ["RolloutResult", "rollout_tasks", "run_rollouts", "binarize_gripper", "EVAL_SEED_OFFSET"]

EVAL_SEED_OFFSET = 10_000_019  # evaluation layouts never coincide with demonstration layouts


@dataclass
class RolloutResult:
    """Success rate per task id, their mean, and the control steps taken (for the compute charge).

    ``reach`` and ``grasp`` only for environments whose steps report progress (LIBERO-Object): per task,
    the mean over episodes of the closest the gripper came to the task's object (m), and the fraction of
    episodes in which the gripper held it at some step. Success alone reads 0 for every policy that almost
    does the task; these say how far each got.
    """

    per_task: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    reach: dict[str, float] = field(default_factory=dict)
    grasp: dict[str, float] = field(default_factory=dict)

    @property
    def success(self) -> float:
        return float(np.mean(list(self.per_task.values()))) if self.per_task else 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (floats and an int: they read back to the same values)."""
        return {"per_task": self.per_task, "steps": self.steps, "reach": self.reach, "grasp": self.grasp}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RolloutResult:
        """``to_json``'s object read back; ValueError on anything else."""
        if not isinstance(d, Mapping) or set(d) != {"per_task", "steps", "reach", "grasp"}:
            raise ValueError("expected an object with per_task, steps, reach and grasp")
        maps = {}
        for name in ("per_task", "reach", "grasp"):
            m = d[name]
            if not isinstance(m, Mapping) or not all(isinstance(k, str) and isinstance(v, (int, float))
                                                     and not isinstance(v, bool) for k, v in m.items()):
                raise ValueError(f"{name}: expected task ids mapped to numbers")
            maps[name] = {k: float(v) for k, v in m.items()}
        steps = d["steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError("steps: expected a whole number >= 0")
        return cls(per_task=maps["per_task"], steps=steps, reach=maps["reach"], grasp=maps["grasp"])


def binarize_gripper(actions: np.ndarray) -> np.ndarray:
    """A copy of ``actions`` (..., A) whose last dimension, the gripper, is +1 where it is > 0 and -1 elsewhere
    (LIBERO's demos and policies: -1 opens, +1 closes); the other dimensions unchanged."""
    out = np.array(actions, copy=True)
    out[..., -1] = np.where(out[..., -1] > 0, 1.0, -1.0)
    return out


@torch.no_grad()
def rollout_tasks(model: nn.Module, layout: ObsLayout, tasks: Sequence[str], episodes: int, horizon: int, *,
                  seed: int = 0, make_env: Callable | None = None, binarize: bool = False) -> RolloutResult:
    """Run ``episodes`` episodes of every task: all episodes of a task step together (the policy batched over
    them), or, when ``make_env.one_env_per_task`` (LIBERO), one after another in one environment. ``binarize``:
    the gripper command goes out as +1 or -1 (``binarize_gripper``)."""
    if make_env is None:
        from p2pfl.robotics.env import RobotEnv
        from p2pfl.robotics.suites import get_task

        make_env = lambda tid: RobotEnv(get_task(tid), layout.image)
    was_training = model.training
    model.eval()
    out = RolloutResult()
    try:
        for ti, tid in enumerate(tasks):
            seeds = [EVAL_SEED_OFFSET + seed * 7919 + ti * 1009 + k for k in range(episodes)]
            if getattr(make_env, "one_env_per_task", False):  # heavy envs (LIBERO): one, reused, closed
                env: Any = make_env(tid)
                try:
                    ep = np.concatenate([_episodes(model, layout, [env], [s], horizon, out, binarize) for s in seeds],
                                        axis=1)
                finally:
                    env.close()
            else:  # all episodes of the task step together, the policy batched over them
                ep = _episodes(model, layout, [make_env(tid) for _ in range(episodes)], seeds, horizon, out, binarize)
            success, reach, grasp = ep
            out.per_task[tid] = float(success.mean())
            if not np.isnan(reach).any():
                out.reach[tid] = float(reach.mean())
                out.grasp[tid] = float(grasp.mean())
    finally:
        model.train(was_training)
    return out


def _episodes(model: nn.Module, layout: ObsLayout, envs: Sequence, seeds: Sequence[int], horizon: int,
              out: RolloutResult, binarize: bool = False) -> np.ndarray:
    """One episode in each env (env k reset with ``seeds[k]``), stepped together. Rows per episode: success,
    the closest reach (NaN where the env reports none), whether the object was held at some step."""
    obs = [e.reset(s) for e, s in zip(envs, seeds)]
    instr = envs[0].task.instruction
    hist = [[o] for o in obs]
    done = np.zeros(len(envs), bool)
    success = np.zeros(len(envs), bool)
    reach = np.full(len(envs), np.nan)
    grasped = np.zeros(len(envs), bool)
    for _ in range(horizon):
        live = np.flatnonzero(~done)
        if live.size == 0:
            break
        x = np.stack([_pack_last(layout, hist[k], instr) for k in live])
        act = model(torch.from_numpy(x)).numpy()
        if binarize:
            act = binarize_gripper(act)
        for a, k in zip(act, live):
            o, info = envs[int(k)].step(a)
            out.steps += 1
            hist[k] = (hist[k] + [o])[-layout.history:]
            if getattr(info, "reach", None) is not None:
                reach[k] = np.fmin(reach[k], info.reach)
                grasped[k] |= bool(info.grasped)
            if info.success:
                done[k] = success[k] = True
    return np.stack([success.astype(float), reach, grasped.astype(float)])


def run_rollouts(model: nn.Module, layout: ObsLayout, tasks: Sequence[str], episodes: int, horizon: int,
                 seed: int, make_env: Callable | None, binarize: bool = False) -> RolloutResult:
    """``rollout_tasks`` with positional arguments: an executor job (``CallJob``), in a worker or here."""
    return rollout_tasks(model, layout, tasks, episodes, horizon, seed=seed, make_env=make_env, binarize=binarize)


def _pack_last(layout: ObsLayout, frames: list[dict], instruction: str) -> np.ndarray:
    imgs = np.stack([f["agentview_rgb"] for f in frames])
    joint = np.stack([f["joint_states"] for f in frames])
    grip = np.stack([f["gripper_states"] for f in frames])
    wrist = np.stack([f["eye_in_hand_rgb"] for f in frames]) if layout.wrist else None
    return pack_samples(layout, imgs, joint, grip, instruction, wrist)[-1]
