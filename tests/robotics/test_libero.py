"""The LIBERO adapter against real LIBERO environments (``pip install -e '.[libero]'``; skipped, with the
reason, without it). The schema checks at the top need no LIBERO."""

from __future__ import annotations

import os

import numpy as np
import pytest

from p2pfl.config import load_dict
from p2pfl.errors import DataError, UserError
from p2pfl.robotics.libero import LiberoEnv, LiberoEnvFactory, check_layout, libero_available, libero_task_names
from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy
from p2pfl.robotics.rollout import LIFT_M, rollout_tasks

from .conftest import needs_mujoco
from .test_suites import _libero_style_file

pytestmark = pytest.mark.robotics

SUITE = "libero_object"
TASK = "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
TID = f"{SUITE}/{TASK}"
_REASON = libero_available()
needs_libero = pytest.mark.skipif(_REASON is not None, reason=f"needs LIBERO: pip install -e '.[libero]' ({_REASON})")


def _scenario(root, partition: dict) -> dict:
    return {"name": "libero", "seed": 0, "topology": {"kind": "complete", "n": 2, "servers": [{"attach": "all"}]},
            "data": {"dataset": "robotics", "root": str(root), "test_fraction": 0.5,
                     "partition": {"kind": "robot_suites", "suites": [SUITE], "clients_per_suite": 2,
                                   "reference_clients": 2, "demos_per_task": 3, "eval_episodes": 1,
                                   "source": "libero", "libero_tasks": {SUITE: [f"{TASK}_demo.hdf5"]}, **partition}},
            "training": {"batch_size": 4, "lr": 0.001, "optimizer": "adamw"},
            "protocol": {"name": "fedavg", "rounds": 1}}


def test_suite_names_are_checked_against_the_source(tmp_path):
    with pytest.raises(UserError, match="'object' is not a libero suite; valid: libero_spatial, libero_object"):
        load_dict(_scenario(tmp_path, {"suites": ["object"]}))
    with pytest.raises(UserError, match="'libero_object' is not a generated suite; valid: spatial, object, goal"):
        load_dict(_scenario(tmp_path, {"source": "generated"}))
    with pytest.raises(UserError, match="'libero_goal' is not one of the suites"):
        load_dict(_scenario(tmp_path, {"horizons": {"libero_goal": 10}}))
    with pytest.raises(UserError, match="wrist: true needs source: libero"):
        load_dict(_scenario(tmp_path, {"source": "generated", "suites": ["object"], "libero_tasks": {}, "wrist": True}))


def test_libero_suites_get_liberos_horizons_unless_given(tmp_path):
    assert load_dict(_scenario(tmp_path, {})).data.partition.horizons == {SUITE: 280}
    assert load_dict(_scenario(tmp_path, {"horizons": {SUITE: 7}})).data.partition.horizons == {SUITE: 7}
    generated = _scenario(tmp_path, {"source": "generated", "suites": ["object"], "libero_tasks": {}})
    assert load_dict(generated).data.partition.horizons == {}  # generated suites keep `horizon`


def test_the_gripper_is_binarized_by_default_on_libero_only(tmp_path):
    assert load_dict(_scenario(tmp_path, {})).data.partition.binarize_gripper is True
    assert load_dict(_scenario(tmp_path, {"binarize_gripper": False})).data.partition.binarize_gripper is False
    generated = _scenario(tmp_path, {"source": "generated", "suites": ["object"], "libero_tasks": {}})
    assert load_dict(generated).data.partition.binarize_gripper is False


@needs_libero
def test_task_names_come_from_the_benchmark():
    names = libero_task_names(SUITE)
    assert len(names) == 10 and TASK in names
    with pytest.raises(DataError, match="LIBERO suite 'object' is not one of libero_spatial"):
        libero_task_names("object")


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_observations_action_and_instruction_of_a_real_env():
    env = LiberoEnv(SUITE, TASK, image=32, instruction="from the demo file")
    try:
        obs = env.reset(0)
        assert obs["agentview_rgb"].shape == (32, 32, 3) and obs["agentview_rgb"].dtype == np.uint8
        assert obs["joint_states"].shape == (7,) and obs["gripper_states"].shape == (2,)
        assert env.action_dim == 7 and env.task.instruction == "from the demo file"
        o2, info = env.step(np.zeros(7))
        assert o2["joint_states"].shape == (7,) and info.success is False
        assert env.env.env.camera_names == ["agentview"]  # only the camera the policy reads is rendered
        assert "eye_in_hand_rgb" not in obs
    finally:
        env.close()
    env = LiberoEnv(SUITE, TASK, image=32, instruction="x", wrist=True)
    try:
        obs = env.reset(0)
        assert env.env.env.camera_names == ["agentview", "robot0_eye_in_hand"]
        assert obs["eye_in_hand_rgb"].shape == (32, 32, 3) and obs["eye_in_hand_rgb"].dtype == np.uint8
        assert not np.array_equal(obs["eye_in_hand_rgb"], obs["agentview_rgb"])
    finally:
        env.close()
    factory = LiberoEnvFactory(32, ((TID, "x"),))
    with pytest.raises(DataError, match="a 7-D action, the demos 7, 2 and 4; use demos recorded with this robot"):
        check_layout(factory, TID, joint=7, gripper=2, action=4)


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_culled_renders_of_a_real_libero_scene_are_byte_identical_to_robosuites():
    """Both cameras at LIBERO's 128 px, over an episode that swings the arm about: every frame is the one
    robosuite draws with all meshes, and the eye-in-hand camera does skip some."""
    import mujoco

    env = LiberoEnv(SUITE, TASK, image=32, instruction="x", wrist=True)
    try:
        env.reset(0)
        sim = env.env.env.sim
        ctx = sim._render_context_offscreen
        rng = np.random.default_rng(0)
        hidden = {"agentview": 0, "robot0_eye_in_hand": 0}
        for _ in range(6):
            for cam in hidden:
                culled = sim.render(128, 128, camera_name=cam)  # the culling render LiberoEnv installed
                hidden[cam] += sum(g.type == mujoco.mjtGeom.mjGEOM_NONE for g in ctx.scn.geoms[:ctx.scn.ngeom])
                type(ctx).render(ctx, 128, 128, camera_id=sim.model.camera_name2id(cam))  # robosuite's own
                assert np.array_equal(culled, ctx.read_pixels(128, 128)), cam
            action = rng.uniform(-1, 1, 7)
            for _ in range(10):
                env.step(action)
        assert hidden["robot0_eye_in_hand"] > 0
    finally:
        env.close()


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_simplified_meshes_leave_a_libero_episode_byte_identical_and_its_images_close():
    """render_lod 0.5 mm on a real scene: every state of a random-action episode is the one drawn with whole
    meshes, the wrist camera's gripper stays whole, and the images differ by a few levels on average."""
    pytest.importorskip("meshoptimizer", reason="needs meshoptimizer (pip install -e '.[libero]')")
    import mujoco

    from p2pfl.robotics.lod import simplified_meshes

    def episode(lod: float):
        env = LiberoEnv(SUITE, TASK, image=32, instruction="x", wrist=True, lod=lod)
        try:
            o = env.reset(0)
            model = env.env.env.sim.model._model
            faces = model.mesh_facenum.copy()
            kept = simplified_meshes(mujoco, model, env.env.env.camera_names)
            hand = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, "gripper0_hand_vis")
            rng = np.random.default_rng(0)
            states, images = [], [o["agentview_rgb"]]
            for _ in range(20):
                o, _ = env.step(rng.uniform(-1, 1, 7))
                states.append(env.env.env.sim.get_state().flatten())
                images.append(o["agentview_rgb"])
            return np.array(states), np.array(images), faces, kept, hand
        finally:
            env.close()

    s0, i0, f0, kept, hand = episode(0.0)
    s1, i1, f1, _, _ = episode(0.0005)
    assert s0.tobytes() == s1.tobytes()
    assert hand not in kept and f1[hand] == f0[hand]
    assert f1[kept].sum() < f0[kept].sum() / 3
    assert 0 < np.abs(i0.astype(np.int16) - i1).mean() < 4


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_rollouts_build_one_env_per_task_reuse_it_and_close_it():
    built, closed = [], []

    class Counting(LiberoEnvFactory):
        def __call__(self, tid):
            env = super().__call__(tid)
            built.append(tid)
            close = env.close
            env.close = lambda: (closed.append(tid), close())  # type: ignore[method-assign]
            return env

    lay = ObsLayout(image=32, joint=7, gripper=2, action=7)
    out = rollout_tasks(ResNetTPolicy(lay), lay, [TID], episodes=3, horizon=2, make_env=Counting(32, ((TID, "go"),)))
    assert built == [TID] and closed == [TID]
    assert out.steps == 3 * 2 and out.per_task == {TID: 0.0}
    assert set(out.reach) == {TID} and 0.05 < out.reach[TID] < 1.0 and out.grasp == {TID: 0.0}  # 2 steps: far, empty
    assert out.lift == {TID: 0.0} and 0.05 < out.carry[TID] < 1.0  # the object still rests away from the basket


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_a_libero_episode_reads_the_same_alone_as_after_others_in_its_env():
    """What lets a scoring run in parts (``rollout_parts``): episodes 1 and 2 of a task, run alone in a fresh
    environment, give the rows they give after episode 0 in the same environment."""
    from p2pfl.robotics.rollout import run_rollout_part

    lay = ObsLayout(image=32, joint=7, gripper=2, action=7, wrist=True)
    make_env = LiberoEnvFactory(32, ((TID, "go"),), wrist=True, lod=0.0005)
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    policy = ResNetTPolicy(lay)
    after = run_rollout_part(policy, lay, 0, TID, range(0, 3), 6, 0, make_env, True)
    alone = run_rollout_part(policy, lay, 0, TID, range(1, 3), 6, 0, make_env, True)
    assert after.rows[:, 1:].tobytes() == alone.rows.tobytes() and after.steps == 3 * 6 and alone.steps == 2 * 6
    assert not np.array_equal(after.rows[:, 0], after.rows[:, 1])  # the episodes start from other states


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_episodes_after_our_soft_reset_are_a_hard_resets_byte_for_byte(monkeypatch):
    """LiberoEnv keeps the scene compiled between episodes; robosuite's hard reset (LIBERO's default) gives the
    same observations and states, episode after episode, with the episodes before acting at random (the
    gripper left closed). Without ``renew_robots`` the second episode's states differ."""

    def episodes(hard: bool) -> list[bytes]:
        env = LiberoEnv(SUITE, TASK, image=32, instruction="x", wrist=True)
        robosuite = env.env.env
        robosuite.hard_reset = hard
        rng = np.random.default_rng(0)
        out = []
        try:
            for seed in (0, 1):
                o = env.reset(seed)
                rows = [o["agentview_rgb"].tobytes(), o["eye_in_hand_rgb"].tobytes()]
                for _ in range(6):
                    action = rng.uniform(-1, 1, 7)
                    action[-1] = 1.0  # close the gripper
                    o, info = env.step(action)
                    rows += [o["agentview_rgb"].tobytes(), o["joint_states"].tobytes(), repr(info).encode(),
                             robosuite.sim.get_state().flatten().tobytes()]
                out.append(b"".join(rows))
        finally:
            env.close()
        return out

    hard = episodes(True)
    assert episodes(False) == hard
    monkeypatch.setattr("p2pfl.robotics.libero.renew_robots", lambda env: None)
    kept = episodes(False)
    assert kept[0] == hard[0] and kept[1] != hard[1]


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
@pytest.mark.parametrize("wrist", [False, True])
def test_a_one_round_fedavg_scenario_on_a_libero_task(tmp_path, wrist):
    """The whole path on a LIBERO task (demo file in LIBERO's layout, random content): rollouts run in the
    real env, 1 episode of 2 steps, charged at LIBERO's measured step cost (with the wrist camera's render)."""
    from p2pfl.robotics.federation import LIBERO_STEP_FLOPS, LIBERO_WRIST_STEP_FLOPS
    from p2pfl.sim.kernel import Simulation

    _libero_style_file(tmp_path / f"{TASK}_demo.hdf5", n=3, t=6, size=32)
    sim = Simulation(load_dict(_scenario(tmp_path, {"horizons": {SUITE: 2}, "wrist": wrist})))
    summary = sim.run()
    charged = [e["flops"] for e in sim.recorder.events if e["kind"] == "compute" and e["what"] == "rollout"]
    model = sim.new_model()
    assert any(k.startswith("wrist.") for k in model.state_dict()) == wrist
    forward = sim.forward_flops(model)
    step = LIBERO_WRIST_STEP_FLOPS if wrist else LIBERO_STEP_FLOPS
    assert charged and all(f == 2 * (forward + step) for f in charged)
    logs = summary["logs"]["rollout_success"]
    assert {e["suite"] for e in logs} == {SUITE} and all(e["value"] == 0.0 for e in logs)
    per_task = [e["per_task"] for e in logs]
    assert all(set(p) == {TID} for p in per_task)  # the rollouts ran on the LIBERO task
    assert all(set(e["reach"]) == {TID} and e["grasp"] == {TID: 0.0} for e in logs)  # with their progress
    assert all(e["lift"] == {TID: 0.0} and set(e["carry"]) == {TID} for e in logs)


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_a_recorded_expert_demo_is_in_liberos_format_and_replays_to_success(tmp_path):
    """One scripted demo of LIBERO-Object task 0: every attribute LIBERO's dataset files carry, read back by
    our reader, and its actions replayed from its init_state in the rollouts' env reach LIBERO's goal check,
    with the progress that env reports (the gripper came within 3 cm of the soup and held it)."""
    import h5py

    from p2pfl.robotics.demos import read_demo_file
    from p2pfl.robotics.gl import require_gl
    from p2pfl.robotics.libero import LiberoEnv, object_of
    from p2pfl.robotics.libero_demos import record_task

    require_gl()
    assert object_of(TASK) == "alphabet_soup"
    with pytest.raises(DataError, match="not a LIBERO-Object pick-and-place task"):
        object_of("open_the_top_drawer")
    res = record_task(SUITE, 0, 1, tmp_path, camera_px=64, max_attempts=3, noise=0.2, joint_noise=0.02)
    assert res.path.name == f"{TASK}_demo.hdf5" and res.demos == 1 and res.attempts <= 3
    with h5py.File(res.path) as f:
        g = f["data"]
        assert {"problem_info", "env_args", "bddl_file_name", "bddl_file_content", "num_demos", "total"} <= set(g.attrs)
        assert (g.attrs["joint_noise"], g.attrs["noise"], g.attrs["render_lod"]) == (0.02, 0.2, 0.0)  # how it was recorded
        d = g["demo_0"]
        assert {"num_samples", "model_file", "init_state"} <= set(d.attrs)
        assert {"actions", "expert_actions", "states", "robot_states", "rewards", "dones"} <= set(d)
        assert set(d["obs"]) == {"agentview_rgb", "eye_in_hand_rgb", "joint_states", "gripper_states", "ee_pos",
                                 "ee_ori", "ee_states"}
        actions, init, bddl = d["actions"][()], d.attrs["init_state"], g.attrs["bddl_file_name"]
        labels = d["expert_actions"][()]
        assert os.path.isfile(bddl) and bddl.endswith(f"{TASK}.bddl")  # LIBERO's tools rebuild the env from it
        arm = d.attrs["init_state"][1:8]  # time, then the arm's 7 joints first in qpos
        assert np.allclose(d["states"][0][1:8], arm)  # the episode started where init_state says
        assert labels.shape == actions.shape and np.array_equal(labels[:, 3:], actions[:, 3:])
        assert np.abs(labels[:, :3] - actions[:, :3]).mean() > 0.05  # the arm executed noisy translations
        assert d["robot_states"].shape == (len(actions), 9) and g.attrs["total"] == len(actions)
    df = read_demo_file(res.path)
    assert len(df.demos) == 1 and df.demos[0].agentview_rgb.shape == (len(actions), 64, 64, 3)
    assert np.allclose(df.demos[0].actions, labels)  # training reads the expert's labels
    env = LiberoEnv(SUITE, TASK, image=32, instruction="x")  # the rollouts' env, its progress report
    try:
        inner = env.env
        inner.seed(0)
        inner.reset()
        default_arm = inner.env.sim.get_state().flatten()[1:8]
        assert 1e-3 < np.abs(arm - default_arm).max() < 0.1  # the arm started perturbed (joint_noise=0.02)
        o = inner.set_init_state(init)
        env.rest(o)
        infos = [env.step(a)[1] for a in actions]
        raw = inner.env._get_observations()
        assert infos[-1].success
        assert infos[-1].reach == pytest.approx(float(np.linalg.norm(raw["robot0_eef_pos"] - raw["alphabet_soup_1_pos"])))
        start = float(np.linalg.norm(o["robot0_eef_pos"] - o["alphabet_soup_1_pos"]))
        assert infos[0].reach > 0.1 and not infos[0].grasped  # the expert starts away from the soup, hand empty
        assert min(i.reach for i in infos) < 0.03 < start and any(i.grasped for i in infos)
        assert infos[-1].to_goal == pytest.approx(float(np.linalg.norm(raw["basket_1_pos"] - raw["alphabet_soup_1_pos"])))
        # LIBERO's initial states put objects a little low and the first steps pop them up (env.reset settles
        # before measuring the rest height); from there the expert lifts the soup
        assert max(i.lift for i in infos) - max(i.lift for i in infos[:5]) > LIFT_M
        assert infos[-1].to_goal < 0.5 * infos[0].to_goal  # and brings it to the basket
    finally:
        env.close()
