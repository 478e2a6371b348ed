"""The factors of the LIBERO behaviour-cloning study (issue 69) as scenario fields: the policy's image size
(``data.partition.image_px``), demos from perturbed starting joints (``joint_noise``, checked against the files),
validation demos (``val_demos_per_task``, which ``centralized``'s ``checkpoint: best_val_nll`` chooses by) and a
larger policy (``model.options`` of ``robot_policy``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from p2pfl.config import load_dict
from p2pfl.errors import ConfigError, DataError, UserError
from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy, robot_policy

from .conftest import needs_mujoco
from .test_libero import SUITE, TASK, TID, _scenario, needs_libero

pytestmark = pytest.mark.robotics

GENERATED = {"source": "generated", "suites": ["object"], "libero_tasks": {}}


def _demo_file(path, n: int, *, t: int = 4, size: int = 16, joint_noise: float | None = None) -> None:
    """A LIBERO-layout file of ``n`` demos (demo_k's actions all k, so a test can tell them apart)."""
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        g = f.create_group("data")
        g.attrs["problem_info"] = json.dumps({"language_instruction": "pick up the alphabet soup and place it in the basket"})
        if joint_noise is not None:
            g.attrs["joint_noise"] = joint_noise
        for k in range(n):
            d = g.create_group(f"demo_{k}")
            d.create_dataset("actions", data=np.full((t, 7), float(k)))
            o = d.create_group("obs")
            for cam in ("agentview_rgb", "eye_in_hand_rgb"):
                o.create_dataset(cam, data=rng.integers(0, 255, (t, size, size, 3), dtype=np.uint8))
            o.create_dataset("joint_states", data=rng.normal(size=(t, 7)))
            o.create_dataset("gripper_states", data=rng.normal(size=(t, 2)))


@pytest.mark.parametrize("partition, message", [
    ({"image_px": 4}, "field 'data.partition.image_px': Input should be greater than or equal to 8; got 4"),
    ({"image_px": 256}, "field 'data.partition.image_px': Input should be less than or equal to 128; got 256"),
    ({**GENERATED, "image_px": 64}, "image_px: 64 needs source: libero (the generated suites' demos are rendered at "
                                    "32 px); remove it"),
    ({"joint_noise": -0.1}, "field 'data.partition.joint_noise': Input should be greater than or equal to 0"),
    ({**GENERATED, "joint_noise": 0.02}, "joint_noise needs source: libero"),
    ({"val_demos_per_task": -1}, "field 'data.partition.val_demos_per_task': Input should be greater than or equal to 0"),
    ({**GENERATED, "val_demos_per_task": 2}, "val_demos_per_task needs source: libero"),
])
def test_the_data_factors_are_checked_when_the_scenario_loads(tmp_path, partition, message) -> None:
    with pytest.raises(UserError, match="^[^\n]*" + _re(message) + "[^\n]*$"):
        load_dict(_scenario(tmp_path, partition))


@pytest.mark.parametrize("options, message", [
    ({"width": 30}, "field 'model.options.width': Input should be a multiple of 4; got 30"),
    ({"width": 2048}, "field 'model.options.width': Input should be less than or equal to 1024; got 2048"),
    ({"depth": 0}, "field 'model.options.depth': Input should be greater than or equal to 1; got 0"),
    ({"channels": 2}, "field 'model.options.channels': Input should be greater than or equal to 4; got 2"),
    ({"heads": 8}, "unknown field 'model.options.heads'; remove it or check its spelling"),
])
def test_policy_options_are_checked_when_the_scenario_loads_and_when_built(tmp_path, options, message) -> None:
    sc = {**_scenario(tmp_path, {}), "model": {"name": "robot_policy", "options": options}}
    with pytest.raises(UserError, match="^[^\n]*" + _re(message) + "[^\n]*$"):
        load_dict(sc)
    with pytest.raises(ConfigError, match=_re(message)):
        robot_policy((10,), 0, hint=ObsLayout(), **options)


def _re(text: str) -> str:
    import re

    return re.escape(text)


def test_the_default_policy_is_the_one_it_always_was_and_options_grow_it() -> None:
    lay = ObsLayout(history=1, joint=7, gripper=2, action=7, wrist=True)
    torch.manual_seed(0)
    plain = ResNetTPolicy(lay)
    torch.manual_seed(0)
    default = robot_policy((lay.width,), 0, hint=lay)
    assert list(plain.state_dict()) == list(default.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), default.state_dict().values()))
    assert sum(p.numel() for p in default.parameters()) == 137_707  # the 0.14 M policy of the LIBERO study
    big = robot_policy((lay.width,), 0, hint=lay, width=256, depth=2, channels=32)
    assert sum(p.numel() for p in big.parameters()) == 1_732_875
    assert "more.0.qkv.weight" in big.state_dict() and big.agent.c1.out_channels == 32
    x = torch.rand(3, lay.width)
    x[:, -lay.tokens:] = 5.0
    assert big(x).shape == (3, 7)
    lay64 = ObsLayout(history=1, joint=7, gripper=2, action=7, wrist=True, image=64)  # image_px 64: 16x16 keypoint maps
    x = torch.rand(2, lay64.width)
    x[:, -lay64.tokens:] = 5.0
    assert ResNetTPolicy(lay64)(x).shape == (2, 7)


@needs_libero
def test_validation_demos_follow_the_training_demos_and_joint_noise_must_match_the_files(tmp_path) -> None:
    from p2pfl.robotics.federation import _suite_demos

    _demo_file(tmp_path / f"{TASK}_demo.hdf5", 5, joint_noise=0.02)
    part = load_dict(_scenario(tmp_path, {"val_demos_per_task": 2, "joint_noise": 0.02})).data.partition
    [(tid, instruction, demos, val)] = _suite_demos(part, SUITE, str(tmp_path))
    assert tid == TID and instruction.startswith("pick up the alphabet soup")
    assert [d.actions[0, 0] for d in demos] == [0, 1, 2] and [d.actions[0, 0] for d in val] == [3, 4]
    part = load_dict(_scenario(tmp_path, {"joint_noise": 0.02})).data.partition
    assert [len(x) for x in _suite_demos(part, SUITE, str(tmp_path))[0][2:]] == [3, 0]  # the first 3, as without
    part = load_dict(_scenario(tmp_path, {"val_demos_per_task": 3, "joint_noise": 0.02})).data.partition
    with pytest.raises(DataError, match=r"5 demos, data.partition.demos_per_task \+ val_demos_per_task = 6 needed; "
                                        r"record more \(libero_demos --demos 6\) or lower val_demos_per_task"):
        _suite_demos(part, SUITE, str(tmp_path))
    part = load_dict(_scenario(tmp_path, {})).data.partition
    with pytest.raises(DataError, match=r"demos recorded with joint_noise 0.02, the scenario says "
                                        r"data.partition.joint_noise 0; set joint_noise: 0.02, or record demos with"):
        _suite_demos(part, SUITE, str(tmp_path))
    _demo_file(tmp_path / f"{TASK}_demo.hdf5", 3)  # recorded before the attribute: the arm's default pose
    assert len(_suite_demos(part, SUITE, str(tmp_path))[0][2]) == 3


@pytest.mark.slow  # 5-38 s with real LIBERO (it skips without it)
@needs_mujoco
@needs_libero
def test_centralized_bc_with_every_factor_on_a_libero_task(tmp_path) -> None:
    """The whole path: 64 px images, a wider and deeper policy, validation demos and the checkpoint they choose,
    on a LIBERO task (random demo content, 1 episode of 2 steps)."""
    from p2pfl.sim.kernel import Simulation

    _demo_file(tmp_path / f"{TASK}_demo.hdf5", 6, size=128)
    sc = _scenario(tmp_path, {"horizons": {SUITE: 2}, "wrist": True, "image_px": 64, "val_demos_per_task": 2,
                              "demos_per_task": 4})
    sc.update(topology={"kind": "complete", "n": 2}, model={"name": "robot_policy", "options": {"width": 32, "depth": 2}},
              protocol={"name": "centralized", "rounds": 3, "checkpoint": "best_val_nll"})
    sim = Simulation(load_dict(sc))
    summary = sim.run()
    assert sim.federation.layout.image == 64 and summary["partition"]["validation_samples"] == 2 * 4
    losses = {e["round"]: e["value"] for e in summary["logs"]["val_nll"]}
    assert sorted(losses) == [1, 2, 3]
    assert summary["checkpoint_val_nll"] == min(losses.values())
    assert losses[summary["checkpoint_round"]] == summary["checkpoint_val_nll"]
    assert [e["round"] for e in summary["logs"]["rollout_success"]] == [3, 3]  # both devices score the checkpoint
    assert "more.0.qkv.weight" in sim.new_model().state_dict()
