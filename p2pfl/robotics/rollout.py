"""Closed-loop rollouts: N seeded episodes per task, batched policy steps, success per task (and, where the
environment reports it, progress: the closest the gripper came to the task's object, whether it held it,
lifted it, and how close it brought the object to the goal).

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

__all__ = ["RolloutResult", "RolloutPart", "rollout_tasks", "run_rollouts", "rollout_parts", "run_rollout_part",
           "combine_parts", "EPISODES_PER_PART", "binarize_gripper", "EVAL_SEED_OFFSET", "LIFT_M"]

EVAL_SEED_OFFSET = 10_000_019  # evaluation layouts never coincide with demonstration layouts
#: An object counts as lifted once it rose this far above where it rested (robosuite's Lift task: 4 cm).
LIFT_M = 0.04
_PROGRESS = ("reach", "grasp", "lift", "carry")


@dataclass
class RolloutResult:
    """Success rate per task id, their mean, and the control steps taken (for the compute charge).

    Progress, only for environments whose steps report it (LIBERO-Object), per task over its episodes:
    ``reach``, the mean of the closest the gripper came to the task's object (m); ``grasp``, the fraction of
    episodes in which the gripper held it at some step; ``lift``, the fraction in which the object rose
    ``LIFT_M`` above where it rested; ``carry``, the mean of the closest the object came to the goal (m).
    Success alone reads 0 for every policy that almost does the task; these say where each stopped.
    """

    per_task: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    reach: dict[str, float] = field(default_factory=dict)
    grasp: dict[str, float] = field(default_factory=dict)
    lift: dict[str, float] = field(default_factory=dict)
    carry: dict[str, float] = field(default_factory=dict)

    @property
    def success(self) -> float:
        return float(np.mean(list(self.per_task.values()))) if self.per_task else 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (floats and an int: they read back to the same values); lift and carry
        only where scored."""
        out = {"per_task": self.per_task, "steps": self.steps, "reach": self.reach, "grasp": self.grasp}
        return {**out, "lift": self.lift, "carry": self.carry} if self.lift else out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RolloutResult:
        """``to_json``'s object read back (one kept before lift and carry were scored reads with them empty);
        ValueError on anything else."""
        base = {"per_task", "steps", "reach", "grasp"}
        if not isinstance(d, Mapping) or set(d) not in (base, base | {"lift", "carry"}):
            raise ValueError("expected an object with per_task, steps, reach and grasp (and lift and carry)")
        maps = {}
        for name in ("per_task", *_PROGRESS):
            m = d.get(name, {})
            if not isinstance(m, Mapping) or not all(isinstance(k, str) and isinstance(v, (int, float))
                                                     and not isinstance(v, bool) for k, v in m.items()):
                raise ValueError(f"{name}: expected task ids mapped to numbers")
            maps[name] = {k: float(v) for k, v in m.items()}
        steps = d["steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError("steps: expected a whole number >= 0")
        return cls(per_task=maps["per_task"], steps=steps, **{name: maps[name] for name in _PROGRESS})


def binarize_gripper(actions: np.ndarray) -> np.ndarray:
    """A copy of ``actions`` (..., A) whose last dimension, the gripper, is +1 where it is > 0 and -1 elsewhere
    (LIBERO's demos and policies: -1 opens, +1 closes); the other dimensions unchanged."""
    out = np.array(actions, copy=True)
    out[..., -1] = np.where(out[..., -1] > 0, 1.0, -1.0)
    return out


def _seeds(seed: int, task_index: int, episodes: Sequence[int]) -> list[int]:
    """The reset seeds of episodes ``episodes`` of the task at ``task_index``: the same for every method."""
    return [EVAL_SEED_OFFSET + seed * 7919 + task_index * 1009 + k for k in episodes]


def _summarise(out: RolloutResult, tid: str, ep: np.ndarray) -> None:
    """Add task ``tid``'s per-episode rows ``ep`` (``_episodes``' layout, episodes in order) to ``out``."""
    success, reach, grasp, lift, carry = ep
    out.per_task[tid] = float(success.mean())
    if not np.isnan(reach).any():
        out.reach[tid] = float(reach.mean())
        out.grasp[tid] = float(grasp.mean())
    if not np.isnan(lift).any():
        out.lift[tid] = float((lift >= LIFT_M).mean())
        out.carry[tid] = float(carry.mean())


def _one_env_episodes(model: nn.Module, layout: ObsLayout, tid: str, seeds: Sequence[int], horizon: int,
                      make_env: Callable, binarize: bool, out: RolloutResult) -> np.ndarray:
    """Episodes one after another in one environment of ``tid`` (built, reused, closed): heavy envs (LIBERO)."""
    env: Any = make_env(tid)
    try:
        return np.concatenate([_episodes(model, layout, [env], [s], horizon, out, binarize) for s in seeds], axis=1)
    finally:
        env.close()


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
            seeds = _seeds(seed, ti, range(episodes))
            if getattr(make_env, "one_env_per_task", False):
                ep = _one_env_episodes(model, layout, tid, seeds, horizon, make_env, binarize, out)
            else:  # all episodes of the task step together, the policy batched over them
                ep = _episodes(model, layout, [make_env(tid) for _ in range(episodes)], seeds, horizon, out, binarize)
            _summarise(out, tid, ep)
    finally:
        model.train(was_training)
    return out


#: Episodes per rollout part (``rollout_parts``): 20 rollouts of 3 tasks are 6 parts, for any number of cores.
EPISODES_PER_PART = 10


@dataclass(frozen=True)
class RolloutPart:
    """What one part of a split rollout returns: task ``tid``'s episodes from ``first`` on, as ``_episodes``'
    rows, and the control steps they took."""

    tid: str
    first: int
    rows: np.ndarray
    steps: int


def rollout_parts(tasks: Sequence[str], episodes: int) -> list[tuple[int, str, range]]:
    """``rollout_tasks``' episodes in parts of at most ``EPISODES_PER_PART``: (task index, task id, episodes).
    Only for environments run one episode at a time (``one_env_per_task``), where an episode's result does not
    depend on which others share its part (a batched policy step could differ in its last bits)."""
    return [(ti, tid, range(a, min(a + EPISODES_PER_PART, episodes)))
            for ti, tid in enumerate(tasks) for a in range(0, episodes, EPISODES_PER_PART)]


@torch.no_grad()
def run_rollout_part(model: nn.Module, layout: ObsLayout, task_index: int, tid: str, episodes: range, horizon: int,
                     seed: int, make_env: Callable, binarize: bool = False) -> RolloutPart:
    """Episodes ``episodes`` of the task at ``task_index`` (``rollout_parts``): an executor job (``CallJob``)."""
    was_training = model.training
    model.eval()
    out = RolloutResult()
    try:
        rows = _one_env_episodes(model, layout, tid, _seeds(seed, task_index, episodes), horizon, make_env, binarize, out)
    finally:
        model.train(was_training)
    return RolloutPart(tid, episodes.start, rows, out.steps)


def combine_parts(tasks: Sequence[str], parts: Sequence[RolloutPart]) -> RolloutResult:
    """The ``RolloutResult`` of parts covering every episode of ``tasks``: the one ``rollout_tasks`` gives (its
    per-episode rows, in order, summarised the same way)."""
    out = RolloutResult(steps=sum(p.steps for p in parts))
    for tid in tasks:
        mine = sorted((p for p in parts if p.tid == tid), key=lambda p: p.first)
        if not mine:
            raise ValueError(f"no rollout part of task {tid!r}")
        _summarise(out, tid, np.concatenate([p.rows for p in mine], axis=1))
    return out


def _episodes(model: nn.Module, layout: ObsLayout, envs: Sequence, seeds: Sequence[int], horizon: int,
              out: RolloutResult, binarize: bool = False) -> np.ndarray:
    """One episode in each env (env k reset with ``seeds[k]``), stepped together. Rows per episode: success,
    the closest reach (NaN where the env reports none), whether the object was held at some step, the highest
    lift and the closest the object came to the goal (NaN where the env reports none)."""
    obs = [e.reset(s) for e, s in zip(envs, seeds)]
    instr = envs[0].task.instruction
    hist = [[o] for o in obs]
    done = np.zeros(len(envs), bool)
    success = np.zeros(len(envs), bool)
    reach, lift, carry = (np.full(len(envs), np.nan) for _ in range(3))
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
            if getattr(info, "lift", None) is not None:
                lift[k] = np.fmax(lift[k], info.lift)
                carry[k] = np.fmin(carry[k], info.to_goal)
            if info.success:
                done[k] = success[k] = True
    return np.stack([success.astype(float), reach, grasped.astype(float), lift, carry])


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
