"""MuJoCo suites, scripted experts, LIBERO-layout demos and the loader."""

from __future__ import annotations

import json

import numpy as np
import pytest

from p2pfl.errors import DataError
from p2pfl.robotics.demos import Demo, generate_demos, read_demo_file, task_demos, write_demo_file
from p2pfl.robotics.suites import SUITES, TASKS, get_task

from .conftest import needs_mujoco

pytestmark = pytest.mark.robotics


def test_three_suites_of_four_tasks_with_distinct_instructions():
    assert sorted(SUITES) == ["goal", "object", "spatial"]
    assert all(len(t) >= 4 for t in SUITES.values())
    assert len({t.instruction for t in TASKS.values()}) == len(TASKS)
    with pytest.raises(ValueError, match="unknown task"):
        get_task("object/green")


def test_spatial_layouts_put_the_target_cube_on_the_named_side_of_the_post():
    for rel, (axis, sign) in {"left": (0, -1), "right": (0, 1), "front": (1, -1), "back": (1, 1)}.items():
        task = get_task(f"spatial/{rel}")
        for s in range(20):
            lay = task.sample(np.random.default_rng(s))
            assert sign * (lay.cubes["cube_a"][axis] - lay.post[axis]) > 0.05
            assert sign * (lay.cubes["cube_b"][axis] - lay.post[axis]) < -0.05


def test_object_tasks_have_their_own_scene_and_the_named_cube_in_a_distinct_slot():
    # LIBERO-Object: each task its own arrangement; jitter stays within 2 cm of the slot
    slots = {}
    for task in SUITES["object"]:
        xs = []
        for s in range(10):
            lay = task.sample(np.random.default_rng(s))
            assert len(lay.cubes) == 4 and all(abs(y - 0.07) <= 0.02 for _, y in lay.cubes.values())
            xs.append(lay.cubes[task.cube][0])
        assert max(xs) - min(xs) <= 0.04
        slots[task.name] = round(float(np.mean(xs)), 2)
    assert len(set(slots.values())) == 4, slots


@needs_mujoco
def test_gripper_start_spreads_over_the_front_of_the_table():
    from p2pfl.robotics.env import HOME, START_SPREAD, RobotEnv

    env = RobotEnv(get_task("goal/stack"))
    starts = []
    for s in range(40):
        env.reset(s)
        starts.append(env.grip_pos.copy())
    starts = np.array(starts)
    assert np.all(np.abs(starts - HOME) <= START_SPREAD + 1e-12)
    assert np.ptp(starts[:, 0]) > 0.15  # wide enough that early displacement does not reveal the task
    env.reset(7)
    again = env.grip_pos.copy()
    env.reset(7)
    assert np.array_equal(again, env.grip_pos)


@pytest.mark.slow
@needs_mujoco
def test_expert_succeeds_on_every_task():
    from p2pfl.robotics.env import Expert, RobotEnv

    for tid, task in TASKS.items():
        env = RobotEnv(task)
        wins = 0
        for s in range(10):
            env.reset(500 + s)
            ex = Expert(env, np.random.default_rng(s))
            for _ in range(80):
                _, info = env.step(ex.act())
                if info.success:
                    wins += 1
                    break
        assert wins >= 10 * 0.95, f"{tid}: expert {wins}/10"


@needs_mujoco
def test_idle_policy_fails_and_observations_have_libero_keys():
    from p2pfl.robotics.env import RobotEnv

    env = RobotEnv(get_task("goal/stack"))
    obs = env.reset(1)
    assert obs["agentview_rgb"].shape == (32, 32, 3) and obs["agentview_rgb"].dtype == np.uint8
    assert obs["joint_states"].shape == (3,) and obs["gripper_states"].shape == (2,)
    for _ in range(20):
        _, info = env.step(np.zeros(4))
    assert not info.success
    # the same seed gives the same scene, another seed another one
    a = env.reset(3)["agentview_rgb"]
    assert np.array_equal(a, env.reset(3)["agentview_rgb"]) and not np.array_equal(a, env.reset(4)["agentview_rgb"])


def _libero_style_file(path, n=2, t=5, size=16):
    """A file written the way LIBERO's own demo files are (extra keys, 7-D actions, 9 proprio dims)."""
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        g = f.create_group("data")
        g.attrs["problem_info"] = json.dumps({"problem_name": "libero_object", "domain_name": "kitchen",
                                              "language_instruction": "pick up the ketchup and place it in the basket"})
        g.attrs["env_args"] = json.dumps({"type": 1})
        g.attrs["bddl_file_name"] = "x.bddl"
        for i in reversed(range(n)):  # out of order on purpose; also demo_10 sorts after demo_2
            d = g.create_group(f"demo_{i if i < 2 else 10}")
            d.attrs["num_samples"] = t
            d.create_dataset("actions", data=rng.uniform(-1, 1, (t, 7)))
            d.create_dataset("states", data=rng.normal(size=(t, 40)))
            d.create_dataset("robot_states", data=rng.normal(size=(t, 9)))
            o = d.create_group("obs")
            o.create_dataset("agentview_rgb", data=rng.integers(0, 255, (t, size, size, 3), dtype=np.uint8))
            o.create_dataset("eye_in_hand_rgb", data=rng.integers(0, 255, (t, size, size, 3), dtype=np.uint8))
            o.create_dataset("joint_states", data=rng.normal(size=(t, 7)))
            o.create_dataset("gripper_states", data=rng.normal(size=(t, 2)))
            o.create_dataset("ee_pos", data=rng.normal(size=(t, 3)))


def test_loader_reads_a_libero_layout_file(tmp_path):
    p = tmp_path / "pick_up_the_ketchup_demo.hdf5"
    _libero_style_file(p, n=3)
    df = read_demo_file(p)
    assert df.instruction == "pick up the ketchup and place it in the basket"
    assert len(df.demos) == 3 and df.demos[0].actions.shape == (5, 7) and df.demos[0].joint_states.shape == (5, 7)
    assert df.demos[0].agentview_rgb.dtype == np.uint8 and df.attrs["bddl_file_name"] == "x.bddl"
    assert len(read_demo_file(p, max_demos=2).demos) == 2
    with pytest.raises(DataError, match="not found"):
        read_demo_file(tmp_path / "missing.hdf5")



def test_loader_reads_the_wrist_camera_only_when_asked(tmp_path):
    import h5py

    p = tmp_path / "pick_up_the_ketchup_demo.hdf5"
    _libero_style_file(p, n=2)
    assert read_demo_file(p).demos[0].eye_in_hand_rgb is None
    with h5py.File(p, "r") as f:
        want = f["data/demo_1/obs/eye_in_hand_rgb"][()]
    got = read_demo_file(p, wrist=True).demos[1].eye_in_hand_rgb
    assert got is not None and np.array_equal(got, want)
    with h5py.File(p, "a") as f:
        del f["data/demo_1/obs/eye_in_hand_rgb"]
    with pytest.raises(DataError, match=r"demo_1 has no obs/eye_in_hand_rgb; set data.partition.wrist: false$"):
        read_demo_file(p, wrist=True)


def test_loader_trains_on_the_experts_labels_where_a_demo_has_them(tmp_path):
    """Noise-injected demos (DART) keep the executed ``actions`` and the expert's ``expert_actions``."""
    import h5py

    p = tmp_path / "pick_up_the_ketchup_demo.hdf5"
    _libero_style_file(p, n=2)
    with h5py.File(p, "a") as f:
        executed = f["data/demo_0/actions"][()]
        f["data/demo_0"].create_dataset("expert_actions", data=executed * 0.5)
    df = read_demo_file(p)
    assert np.allclose(df.demos[0].actions, executed * 0.5)
    with h5py.File(p, "r") as f:
        assert np.allclose(df.demos[1].actions, f["data/demo_1/actions"][()])  # no labels: what was executed

def test_writer_round_trips_in_libero_layout(tmp_path):
    import h5py

    rng = np.random.default_rng(1)
    demos = [Demo(rng.integers(0, 255, (4, 8, 8, 3), dtype=np.uint8), rng.normal(size=(4, 3)).astype(np.float32),
                  rng.normal(size=(4, 2)).astype(np.float32), rng.uniform(-1, 1, (4, 4)).astype(np.float32)) for _ in range(2)]
    p = tmp_path / "t_demo.hdf5"
    write_demo_file(p, "do it", demos, {"task": "x/y"})
    with h5py.File(p) as f:
        assert set(f["data/demo_0/obs"].keys()) == {"agentview_rgb", "joint_states", "gripper_states"}
        assert json.loads(f["data"].attrs["problem_info"])["language_instruction"] == "do it"
        assert f["data/demo_1"].attrs["num_samples"] == 4
    back = read_demo_file(p)
    assert np.array_equal(back.demos[1].agentview_rgb, demos[1].agentview_rgb)
    assert np.allclose(back.demos[0].actions, demos[0].actions)


@needs_mujoco
def test_generated_demos_are_cached_and_deterministic(tmp_path):
    df = task_demos("object/red", 2, str(tmp_path))
    files = list(tmp_path.rglob("*_demo.hdf5"))
    assert len(files) == 1 and len(df.demos) == 2 and df.attrs["expert_success_rate"] >= 0.95
    again, _ = generate_demos("object/red", 2)
    assert np.array_equal(again[0].actions, df.demos[0].actions)
