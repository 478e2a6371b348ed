"""A rollout split into parts (LIBERO: a scoring on every core) gives the one job's result, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfl.robotics.federation import RobotFederation
from p2pfl.robotics.policy import ObsLayout
from p2pfl.robotics.rollout import (
    EPISODES_PER_PART,
    RolloutResult,
    combine_parts,
    rollout_parts,
    rollout_tasks,
    run_rollout_part,
)

LAYOUT = ObsLayout(history=1)


class _SeededEnv:
    """An episode decided by its reset seed: success at step ``seed % 4`` unless ``seed % 3 == 0``, and a reach,
    grasp, lift and distance to the goal that differ by seed, so an episode run with another seed reads otherwise."""

    task = type("T", (), {"instruction": "go"})()

    def reset(self, seed: int) -> dict:
        self.seed, self.t = seed, 0
        return self._obs()

    def _obs(self) -> dict:
        return {"agentview_rgb": np.zeros((LAYOUT.image, LAYOUT.image, 3), np.uint8),
                "joint_states": np.zeros(LAYOUT.joint, np.float32), "gripper_states": np.zeros(LAYOUT.gripper, np.float32)}

    def step(self, a):
        self.t += 1
        s = self.seed
        info = {"success": s % 3 != 0 and self.t > s % 4, "reach": (s % 7) / 10 + 1 / self.t,
                "grasped": s % 2 == 0, "lift": (s % 5) / 50, "to_goal": (s % 11) / 10}
        return self._obs(), type("I", (), info)()

    def close(self) -> None:
        pass


class _OneByOne:
    one_env_per_task = True

    def __call__(self, tid: str) -> _SeededEnv:
        return _SeededEnv()


def _policy() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(LAYOUT.width, LAYOUT.action)


def test_parts_cover_every_episode_of_every_task_once_in_order():
    parts = rollout_parts(["a", "b"], 23)
    assert EPISODES_PER_PART == 10
    assert [(ti, tid, (r.start, r.stop)) for ti, tid, r in parts] == [
        (0, "a", (0, 10)), (0, "a", (10, 20)), (0, "a", (20, 23)), (1, "b", (0, 10)), (1, "b", (10, 20)), (1, "b", (20, 23))]


def test_a_rollout_run_in_parts_is_the_one_jobs_result():
    model, tasks = _policy(), ["a", "b"]
    whole = rollout_tasks(model, LAYOUT, tasks, 23, 5, seed=3, make_env=_OneByOne(), binarize=True)
    parts = [run_rollout_part(model, LAYOUT, ti, tid, eps, 5, 3, _OneByOne(), True) for ti, tid, eps in
             rollout_parts(tasks, 23)]
    joined = combine_parts(tasks, parts[::-1])  # in any order
    assert joined.to_json() == whole.to_json()
    assert 0 < whole.per_task["a"] < 1 and whole.reach["a"] != whole.reach["b"]  # episodes differ by seed
    assert whole.steps == sum(p.steps for p in parts) < 2 * 23 * 5
    # a part run as another task's (other seeds) reads otherwise: the equality above is not a coincidence
    moved = run_rollout_part(model, LAYOUT, 1, "a", range(0, 10), 5, 3, _OneByOne(), True)
    assert not np.array_equal(moved.rows, parts[0].rows)


def test_libero_like_federations_score_in_parts_and_others_in_one_job():
    fed = RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(LAYOUT.width,), true_clusters=(),
                          layout=LAYOUT, suite_tasks={"s": ("a", "b")}, eval_episodes=12, horizon=4, seed=1,
                          make_env=_OneByOne())
    model = _policy()
    parts, combine = fed.rollout_split(model, "s")
    assert len(parts) == 4
    fn, args = fed.rollout_call(model, "s")
    assert combine([f(*a) for f, a in parts]).to_json() == fn(*args).to_json()
    plain = RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(LAYOUT.width,),
                            true_clusters=(), layout=LAYOUT, suite_tasks={"s": ("a",)})
    assert plain.rollout_split(model, "s") == ((), None)  # batched episodes: one job (a batch's bits)


def test_a_kept_result_of_simplified_meshes_is_named_apart():
    from p2pfl.robotics.libero import LiberoEnvFactory

    def digest(lod: float) -> str:
        fed = RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(LAYOUT.width,),
                              true_clusters=(), layout=LAYOUT, suite_tasks={"s": ("a",)},
                              make_env=LiberoEnvFactory(32, (("a", "go"),), lod=lod))
        return fed.rollout_digest(_policy(), ("s", "w"))

    assert digest(0.0) != digest(0.0005) != digest(0.001)
    whole = RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(LAYOUT.width,),
                            true_clusters=(), layout=LAYOUT, suite_tasks={"s": ("a",)})
    assert digest(0.0) == whole.rollout_digest(_policy(), ("s", "w"))  # whole meshes: the digest as before


def test_a_result_reads_back_after_combining():
    parts = [run_rollout_part(_policy(), LAYOUT, 0, "a", range(0, 3), 4, 0, _OneByOne())]
    out = combine_parts(["a"], parts)
    assert RolloutResult.from_json(out.to_json()) == out
    with pytest.raises(ValueError, match="no rollout part of task 'b'"):
        combine_parts(["a", "b"], parts)  # a task without parts
