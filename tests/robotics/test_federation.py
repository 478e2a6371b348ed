"""Robot federations from YAML: shards, the policy's own loss, rollouts as evaluation events."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.errors import ConfigError
from p2pfl.learning.train import TrainingSpec, train_local
from p2pfl.robotics.federation import dirichlet_demo_split
from p2pfl.robotics.policy import ObsLayout, ResNetTPolicy, pack_samples, tokenize

from .conftest import needs_mujoco

pytestmark = pytest.mark.robotics


def _scenario(tmp_path, protocol: dict, suites=("object", "goal"), per_suite=2) -> dict:
    return {
        "name": "robot-test", "seed": 0,
        "topology": {"kind": "complete", "n": len(suites) * per_suite, "servers": [{"name": "server", "attach": "all"}]},
        "data": {"dataset": "robotics", "root": str(tmp_path), "test_fraction": 0.2,
                 "partition": {"kind": "robot_suites", "suites": list(suites), "clients_per_suite": per_suite,
                               "reference_clients": per_suite, "alpha": 0.5, "demos_per_task": 3, "eval_episodes": 1,
                               "horizon": 4}},
        "training": {"batch_size": 32, "lr": 0.001, "optimizer": "adamw"},
        "protocol": protocol,
    }


def test_policy_size_features_and_packing():
    lay = ObsLayout()
    m = ResNetTPolicy(lay)
    assert 100_000 <= sum(p.numel() for p in m.parameters()) <= 500_000
    x = torch.rand(3, lay.width)
    x[:, -lay.tokens:] = torch.from_numpy(tokenize("pick up the red cube", lay.tokens)).float()
    _, feats = m.encode(x)
    assert set(feats) == {"text", "agent", "joint", "gripper"} and feats["agent"].shape == (3 * lay.history, 64)
    assert m(x).shape == (3, lay.action) and m.distribution(x).logits.shape == (3, 5)
    imgs = torch.randint(0, 255, (4, 32, 32, 3), dtype=torch.uint8).numpy()
    packed = pack_samples(lay, imgs, torch.zeros(4, 3).numpy(), torch.zeros(4, 2).numpy(), "go")
    img = lay.unpack(torch.from_numpy(packed)).agent
    assert torch.allclose(img[2, 1] * 255, torch.from_numpy(imgs[2]).permute(2, 0, 1).float(), atol=1e-3)
    assert torch.equal(img[0, 0], img[0, 1])  # history padded with the first frame
    assert tokenize("Go", 4)[0] == tokenize("go", 4)[0] and tokenize("go", 4)[1] == 0


def test_a_wrist_layout_packs_a_second_camera_with_its_own_encoder():
    """The paper's wrist RGB (M = {text, agent, wrist, joint, gripper}): packed after the agent view, read by
    its own encoder, a modality token per step; the default layout has neither."""
    plain, lay = ObsLayout(), ObsLayout(wrist=True)
    assert lay.width == plain.width + lay.history * lay.frame
    g = torch.Generator().manual_seed(0)
    agent = torch.randint(0, 255, (4, 32, 32, 3), dtype=torch.uint8, generator=g).numpy()
    wrist = torch.randint(0, 255, (4, 32, 32, 3), dtype=torch.uint8, generator=g).numpy()
    joint, grip = torch.rand(4, 3, generator=g).numpy(), torch.rand(4, 2, generator=g).numpy()
    o = lay.unpack(torch.from_numpy(pack_samples(lay, agent, joint, grip, "go", wrist)))
    assert torch.allclose(o.agent[2, 1] * 255, torch.from_numpy(agent[2]).permute(2, 0, 1).float(), atol=1e-3)
    assert torch.allclose(o.wrist[2, 1] * 255, torch.from_numpy(wrist[2]).permute(2, 0, 1).float(), atol=1e-3)
    assert torch.allclose(o.joint[3, 1], torch.from_numpy(joint[3])) and o.tokens[0, 0] == tokenize("go", 1)[0]
    assert plain.unpack(torch.from_numpy(pack_samples(plain, agent, joint, grip, "go"))).wrist is None
    with pytest.raises(ValueError, match=r"layout\.wrist=True but wrist images missing"):
        pack_samples(lay, agent, joint, grip, "go")
    with pytest.raises(ValueError, match=r"layout\.wrist=False but wrist images given"):
        pack_samples(plain, agent, joint, grip, "go", wrist)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m, m0 = ResNetTPolicy(lay), ResNetTPolicy(plain)
    assert not any(k.startswith("wrist.") for k in m0.state_dict()) and m0.pos.shape == (1, 1 + 3 * 2, 64)
    assert m.pos.shape == (1, 1 + 4 * 2, 64)
    x = torch.from_numpy(pack_samples(lay, agent, joint, grip, "go", wrist))
    _, feats = m.encode(x)
    assert list(feats) == ["text", "agent", "wrist", "joint", "gripper"] and feats["wrist"].shape == (4 * 2, 64)
    x2 = torch.from_numpy(pack_samples(lay, agent, joint, grip, "go", 255 - wrist))
    with torch.no_grad():
        assert not torch.allclose(m.encode(x)[0], m.encode(x2)[0])  # the policy sees the wrist camera


@pytest.mark.slow
def test_train_local_uses_the_models_own_loss():
    g = torch.Generator().manual_seed(0)  # the test owns its randomness (no global RNG state from other tests)
    lay = ObsLayout(history=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = ResNetTPolicy(lay)
    x, y = torch.rand(64, lay.width, generator=g), torch.rand(64, lay.action, generator=g) * 2 - 1
    with torch.no_grad():
        before = float(m.loss(x, y))
    res = train_local(m, x, y, TrainingSpec(epochs=10, batch_size=16, lr=0.003, optimizer="adamw", grad_clip=100),
                      generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        after = float(m.loss(x, y))
    assert res.samples == 640 and after < before - 0.25


def test_dirichlet_demo_split_covers_every_demo_once():
    import numpy as np

    tasks = np.repeat(np.arange(4), 10)
    parts = dirichlet_demo_split(tasks, 5, 0.5, rng=np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(40)) and all(len(p) for p in parts)


def test_robot_partition_needs_the_robotics_dataset(tmp_path):
    sc = _scenario(tmp_path, {"name": "fedavg", "rounds": 1})
    sc["data"]["dataset"] = "digits"
    with pytest.raises(ConfigError, match="robot_suites"):
        p2pfl.run(sc, write=False)


@needs_mujoco
@pytest.mark.parametrize("protocol", [
    {"name": "feddrman", "rounds": 2, "n_clusters": 2, "rank": 4},
    {"name": "fedavg", "rounds": 1},
    {"name": "fedprox", "rounds": 1, "mu": 0.001},
    {"name": "local", "rounds": 1},
    {"name": "centralized", "rounds": 1},
    {"name": "fedkd", "rounds": 2},
])
@pytest.mark.slow
def test_protocols_run_from_yaml_with_rollouts_as_events(tmp_path, protocol):
    r = p2pfl.run(_scenario(tmp_path, protocol), write=False)
    s = r.summary
    rollouts = s["logs"]["rollout_success"]
    assert {e["suite"] for e in rollouts} == {"object", "goal"}
    assert all(set(e["per_task"]) and 0 <= e["value"] <= 1 for e in rollouts)
    assert not any("reach" in e or "grasp" in e for e in rollouts)  # our suites' envs report no progress
    assert all(isinstance(e["bc_test_loss"], float) and math.isfinite(e["bc_test_loss"]) for e in rollouts)
    assert s["metric"] == "success" and "accuracy_per_node" not in s  # scores named by the metric
    assert s["success_last_round"] == s["success_curve"][-1]["success_mean"] == s["success_best_of_last_k"]  # k = 1
    assert len(s["success_per_node"]) == 4 and all(a is not None for a in s["success_per_node"])
    assert s["partition"]["suite_per_device"] == ["object", "object", "goal", "goal"]
    assert s["compute_flops_total"] > 0
    if protocol["name"] == "feddrman":
        assert len(s["clusters"]) == 2 and sorted(d for c in s["clusters"] for d in c) == [0, 1, 2, 3]
        assert len(s["logs"]["cua_similarity"]) == 2


@pytest.mark.slow
@needs_mujoco
def test_feddrman_rollout_compute_is_charged_and_runs_are_identical(tmp_path):
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation

    sc = load_dict(_scenario(tmp_path, {"name": "feddrman", "rounds": 1, "n_clusters": 2, "rank": 4, "srb": False}))
    a = Simulation(sc)
    sa = a.run()
    kinds = {e.get("what") for e in a.recorder.events if e["kind"] == "compute"}
    assert {"train", "distill", "rollout"} <= kinds
    sb = Simulation(sc).run()
    assert sa["success_per_node"] == sb["success_per_node"] and sa["compute_flops_total"] == sb["compute_flops_total"]


@pytest.mark.slow
@needs_mujoco
def test_a_rollout_job_is_sized_for_the_executor_by_its_bound(tmp_path):
    """A rollout job carries the most its rollouts can cost (every episode to the horizon), not 0, so the
    process executor's load balance does not queue every rollout behind training as if it were free
    (measured: Local's five LIBERO rollouts all ran in one process while the other worker idled)."""
    from p2pfl.config import load_dict
    from p2pfl.executors.jobs import CallJob
    from p2pfl.sim.kernel import Simulation

    sim = Simulation(load_dict(_scenario(tmp_path, {"name": "local", "rounds": 1})))
    sizes, submit = [], sim.executor.submit
    sim.executor.submit = lambda job: (sizes.append(job.flops) if isinstance(job, CallJob) else None, submit(job))[1]
    sim.run()
    fed, forward = sim.federation, sim.forward_flops(sim.new_model())
    bound = {s: fed.rollout_flops_bound(s, forward) for s in ("object", "goal")}
    steps = {s: len(fed.suite_tasks[s]) * 1 * 4 for s in bound}  # tasks x 1 episode x horizon 4
    assert bound == {s: steps[s] * (forward + fed.step_flops) for s in bound} and all(b > 0 for b in bound.values())
    assert sorted(sizes) == sorted(bound[s] for s in fed.device_suites)  # one job per Local policy
    charged = [e["flops"] for e in sim.recorder.events if e["kind"] == "compute" and e["what"] == "rollout"]
    assert len(charged) == 4 and all(0 < c <= max(bound.values()) for c in charged)


def test_proprio_is_standardised_so_open_and_closed_grippers_differ():
    from p2pfl.robotics.policy import RunningNorm

    norm = RunningNorm(2)
    opened, closed = torch.full((8, 2), 0.03), torch.full((8, 2), 0.005)
    batch = torch.cat([opened, closed])
    for _ in range(50):
        norm(batch)
    norm.eval()
    out = norm(batch)
    assert torch.allclose(out.mean(0), torch.zeros(2), atol=1e-3) and torch.allclose(out.std(0, unbiased=False), torch.ones(2), atol=1e-2)
    assert (out[0] - out[-1]).abs().min() > 1.5  # raw inputs differ by 0.025; standardised by about 2
    assert all(torch.is_floating_point(v) for v in norm.state_dict().values())  # aggregators average every buffer


def test_binarize_gripper_sends_plus_or_minus_one_and_leaves_the_other_dims():
    from p2pfl.robotics.rollout import binarize_gripper

    a = np.array([[0.1, -0.5, 0.7, 0.3], [0.4, 0.2, -0.9, -0.2], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    out = binarize_gripper(a)
    assert out[:, -1].tolist() == [1.0, -1.0, -1.0] and np.array_equal(out[:, :-1], a[:, :-1])
    assert a[0, -1] == np.float32(0.3)  # a copy


class _StubEnv:
    """Records the actions a rollout sends; never succeeds."""

    task = type("T", (), {"instruction": "go"})()

    def __init__(self, sent: list) -> None:
        self.sent = sent

    def _obs(self) -> dict:
        return {"agentview_rgb": np.zeros((32, 32, 3), np.uint8), "joint_states": np.zeros(3, np.float32),
                "gripper_states": np.zeros(2, np.float32)}

    def reset(self, seed: int) -> dict:
        return self._obs()

    def step(self, a):
        self.sent.append(np.array(a))
        return self._obs(), type("I", (), {"success": False})()


@pytest.mark.parametrize("binarize", [False, True])
def test_rollouts_binarize_the_policys_gripper_command_when_asked(binarize):
    from p2pfl.robotics.rollout import rollout_tasks

    class Fixed(torch.nn.Module):  # a policy whose gripper commands are 0.3 and -0.2
        def forward(self, x):
            return torch.tensor([[0.5, -0.1, 0.2, 0.3], [0.6, 0.0, -0.4, -0.2]])[: x.shape[0]]

    sent: list = []
    rollout_tasks(Fixed(), ObsLayout(history=1), ["t"], episodes=2, horizon=1, make_env=lambda tid: _StubEnv(sent),
                  binarize=binarize)
    assert [float(a[-1]) for a in sent] == pytest.approx([1.0, -1.0] if binarize else [0.3, -0.2])
    assert np.allclose(np.stack(sent)[:, :3], [[0.5, -0.1, 0.2], [0.6, 0.0, -0.4]])  # the other dims as the policy said


def test_rollouts_score_where_each_episode_stopped_and_the_result_reads_back():
    from p2pfl.robotics.rollout import LIFT_M, RolloutResult, rollout_tasks

    # per episode, each step's (reach, grasped, lift, to_goal): one lifts the object 5 cm and carries it to 8 cm of
    # the goal, one holds it at 3 cm (under LIFT_M), one never touches it
    scripts = [[(0.10, False, 0.0, 0.50), (0.01, True, 0.05, 0.08), (0.02, True, 0.01, 0.20)],
               [(0.20, False, 0.0, 0.40), (0.02, True, 0.03, 0.35), (0.03, False, 0.0, 0.38)],
               [(0.30, False, 0.0, 0.60), (0.25, False, 0.0, 0.61), (0.28, False, 0.0, 0.62)]]

    class Scripted(_StubEnv):
        def reset(self, seed: int) -> dict:
            self.left = list(scripts[len(self.sent) // 3])
            return self._obs()

        def step(self, a):
            reach, grasped, lift, to_goal = self.left.pop(0)
            self.sent.append(np.array(a))
            return self._obs(), type("I", (), {"success": False, "reach": reach, "grasped": grasped, "lift": lift,
                                               "to_goal": to_goal})()

        def close(self) -> None:
            pass

    class OneEnv:  # hands out one env for a task's episodes, as LIBERO's factory does
        one_env_per_task = True

        def __call__(self, tid: str) -> Scripted:
            return Scripted(sent)

    sent: list = []
    factory = OneEnv()
    out = rollout_tasks(torch.nn.Linear(ObsLayout(history=1).width, 4), ObsLayout(history=1), ["t"], episodes=3,
                        horizon=3, make_env=factory)
    assert LIFT_M == 0.04 and out.steps == 9
    assert out.reach == {"t": pytest.approx((0.01 + 0.02 + 0.25) / 3)} and out.grasp == {"t": pytest.approx(2 / 3)}
    assert out.lift == {"t": pytest.approx(1 / 3)} and out.carry == {"t": pytest.approx((0.08 + 0.35 + 0.60) / 3)}
    assert RolloutResult.from_json(out.to_json()) == out
    old = {"per_task": {"t": 0.0}, "steps": 9, "reach": {"t": 0.1}, "grasp": {"t": 0.0}}  # kept before lift was scored
    assert RolloutResult.from_json(old).lift == {} and RolloutResult.from_json(old).to_json() == old
    with pytest.raises(ValueError, match="and lift and carry"):
        RolloutResult.from_json({**old, "lift": {}})


def test_summary_scores_the_last_round_and_the_best_of_the_last_k_side_by_side():
    from p2pfl.robotics.federation import RobotFederation

    fed = RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(1,), true_clusters=(),
                          best_of_last=3)
    points = ((5, 0.9), (10, 0.4), (15, 0.6), (20, 0.6), (25, 0.5))
    curve = [{"round": r, "t": 0.0, "success_mean": v} for r, v in points]
    # round 5's 0.9 is not among the last 3 evaluations; of the tied 0.6s the latest round is named
    assert fed.score_fields(curve) == {"success_last_round": 0.5, "success_best_of_last_k": 0.6,
                                       "success_best_round": 20, "best_of_last_k": 3}
    curve[-1]["success_mean"] = None  # a diverged evaluation is left out
    assert fed.score_fields(curve)["success_last_round"] == 0.6
    assert RobotFederation(dataset="robotics", shards=(), num_classes=0, input_shape=(1,),
                           true_clusters=()).score_fields([]) == {}


def test_bc_test_loss_is_the_policys_nll_on_the_devices_held_out_demos_in_eval_mode():
    from p2pfl.data.shards import Shard
    from p2pfl.robotics.federation import RobotFederation

    lay = ObsLayout(history=1)
    rng = np.random.default_rng(0)

    def demos(t: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = pack_samples(lay, rng.integers(0, 255, (t, 32, 32, 3), dtype=np.uint8), rng.normal(size=(t, 3)),
                         rng.normal(size=(t, 2)), "pick up the red cube")
        return torch.from_numpy(x), torch.from_numpy(rng.uniform(-1, 1, (t, lay.action)).astype(np.float32))

    (x0, y0), (x1, y1), (x2, y2) = demos(40), demos(300), demos(20)
    none = (torch.zeros(0, lay.width), torch.zeros(0, lay.action))
    shards = (Shard(x0, y0, x1, y1, 0), Shard(x0, y0, x2, y2, 0), Shard(x0, y0, *none, 0))
    fed = RobotFederation(dataset="robotics", shards=shards, num_classes=0, input_shape=(lay.width,),
                          true_clusters=(0, 0, 0), layout=lay)
    torch.manual_seed(0)
    policy = ResNetTPolicy(lay).train()
    policy(x0)  # train mode: the proprio statistics move (eval mode would not)
    with torch.no_grad():
        expected = [float(policy.eval().loss(x1, y1)), float(policy.loss(x2, y2))]
    policy.train()
    got = [fed.bc_test_loss(0, policy, batch=128), fed.bc_test_loss(1, policy)]  # 300 samples in 3 batches
    assert got[0] == pytest.approx(expected[0], rel=1e-5) and got[1] == pytest.approx(expected[1], rel=1e-5)
    assert got[0] != pytest.approx(got[1], rel=1e-3)  # each device's own demos
    assert policy.training  # its mode as it was
    assert fed.bc_test_loss(2, policy) is None and fed.bc_test_loss(0, torch.nn.Linear(2, 2)) is None


def test_robot_partition_defaults_to_one_step_history():
    from p2pfl.robotics.schema import RobotSuitesPartition

    assert RobotSuitesPartition(kind="robot_suites").history == 1  # 2 lets BC copy the last action from proprio


@pytest.mark.slow
@needs_mujoco
def test_fedkd_sends_only_the_compressed_mentee_and_never_the_mentor(tmp_path):
    from p2pfl.config import load_dict
    from p2pfl.protocols.server.fedkd import FedKD
    from p2pfl.sim.cost import HEADER_BYTES, payload_bytes
    from p2pfl.sim.kernel import Simulation

    sim = Simulation(load_dict(_scenario(tmp_path, {"name": "fedkd", "rounds": 2, "mentee_width": 16})))
    s = sim.run()
    mentee = FedKD(sim.protocol.params, sim.run_info).make_mentee()
    dense = payload_bytes(mentee.state_dict())
    mentor = payload_bytes(sim.new_model().state_dict())
    assert dense < mentor / 2  # the shared mentee is much narrower than the private mentor
    sends = [e for e in sim.recorder.events if e["kind"] == "send"]
    ups = [e for e in sends if e["src"] < 4]
    downs = [e for e in sends if e["src"] >= 4]
    assert len(ups) == 8 and len(downs) == 8
    # round 1 downloads the dense mentee (+ the 8-byte train flag); every upload is compressed below dense size
    assert sorted(e["bytes"] for e in downs)[-4:] == [HEADER_BYTES + dense + 8] * 4
    assert all(e["bytes"] < HEADER_BYTES + dense for e in ups)
    assert all(e["bytes"] < mentor for e in sends)
    ratios = [e["value"] for e in s["logs"]["fedkd_upload_ratio"]]
    assert len(ratios) == 8 and all(0 < v < 1 for v in ratios)
    again = Simulation(load_dict(_scenario(tmp_path, {"name": "fedkd", "rounds": 2, "mentee_width": 16}))).run()
    assert again["bytes_total"] == s["bytes_total"] and again["success_per_node"] == s["success_per_node"]


def _pair_and_batch():
    from p2pfl.protocols.server.fedkd import MentorMentee

    lay = ObsLayout(history=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pair = MentorMentee(ResNetTPolicy(lay), ResNetTPolicy(lay, d=16))
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(32, lay.width, generator=g), torch.rand(32, lay.action, generator=g) * 2 - 1
    x[:, -lay.tokens:] = torch.from_numpy(tokenize("pick up the red cube", lay.tokens)).float()
    return pair, x, y


def test_mutual_distillation_trains_both_models_and_the_hidden_map():
    from p2pfl.protocols.server.fedkd import mutual_distillation_loss

    pair, x, y = _pair_and_batch()
    loss = mutual_distillation_loss(pair, x, y, torch.Generator().manual_seed(2))
    loss.backward()
    for part in (pair.mentor.head, pair.mentee.head, pair.hidden):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


def test_distillation_terms_split_fedkds_loss_into_its_parts():
    from p2pfl.protocols.server.fedkd import mutual_distillation_loss
    from p2pfl.robotics.gmm import gmm_nll

    pair, x, y = _pair_and_batch()
    task = gmm_nll(pair.mentor.distribution(x), y) + gmm_nll(pair.mentee.distribution(x), y)
    loss = {t: mutual_distillation_loss(pair, x, y, torch.Generator().manual_seed(2), terms=t)
            for t in ("all", "action", "hidden", "none")}
    assert torch.equal(loss["none"], task)  # no distillation: behaviour cloning of both policies
    assert float(loss["action"] - task) != 0 and float(loss["hidden"] - task) > 0
    torch.testing.assert_close(loss["all"] - task, (loss["action"] - task) + (loss["hidden"] - task))
    default = mutual_distillation_loss(pair, x, y, torch.Generator().manual_seed(2))
    assert torch.equal(default, loss["all"])  # FedKD-A unless an ablation is asked for


@pytest.mark.parametrize("terms, hidden_map_trains", [("action", False), ("hidden", True), ("none", False)])
def test_an_ablated_term_leaves_its_parameters_untrained(terms, hidden_map_trains):
    from p2pfl.protocols.server.fedkd import mutual_distillation_loss

    pair, x, y = _pair_and_batch()
    mutual_distillation_loss(pair, x, y, torch.Generator().manual_seed(2), terms=terms).backward()
    assert all(p.grad is not None for p in pair.mentor.head.parameters())
    assert all((p.grad is not None) == hidden_map_trains for p in pair.hidden.parameters())


def test_an_unknown_distillation_term_is_a_config_error_naming_the_field(tmp_path):
    from p2pfl.config import load_dict

    with pytest.raises(ConfigError, match="distill_terms"):
        load_dict(_scenario(tmp_path, {"name": "fedkd", "rounds": 2, "distill_terms": "kl"}))


@pytest.mark.slow
@needs_mujoco
def test_a_suites_shards_do_not_depend_on_its_position_or_companions(tmp_path):
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation

    def shards(suites):
        sim = Simulation(load_dict(_scenario(tmp_path, {"name": "fedavg", "rounds": 1}, suites=suites)))
        f = sim.federation
        return {(f.device_suites[i], i % 2): (s.train_x, s.train_y) for i, s in enumerate(f.shards)}

    a, b = shards(("object", "goal")), shards(("goal", "object"))
    c = shards(("goal",))
    for key, (x, y) in a.items():
        assert torch.equal(x, b[key][0]) and torch.equal(y, b[key][1])
    assert torch.equal(c[("goal", 0)][1], a[("goal", 0)][1])


def test_build_federation_hands_the_plugin_kind_to_robotics(tmp_path, monkeypatch):
    """``robot_suites`` is a plug-in's partition kind: ``p2pfl.data.build_federation`` (and the kernel's
    ``build_any_federation``) hand it to robotics' own builder, which checks rendering first."""
    from p2pfl.config import load_dict
    from p2pfl.data import DataSpec, build_federation
    from p2pfl.errors import UserError
    from p2pfl.robotics.schema import RobotSuitesPartition
    from p2pfl.sim.world import build_any_federation

    robot = load_dict(_scenario(tmp_path, {"name": "fedavg", "rounds": 1})).data
    assert type(robot.partition) is RobotSuitesPartition
    monkeypatch.setenv("MUJOCO_GL", "bogus")  # the robot builder checks rendering first, on any machine
    with pytest.raises(UserError, match="MuJoCo rendering needs an OpenGL backend"):
        build_federation(robot, 4, seed=0)
    with pytest.raises(UserError, match="MuJoCo rendering needs an OpenGL backend"):
        build_any_federation(robot, 4, 0)
    digits = DataSpec(dataset="digits", partition={"kind": "iid"})
    a, b = build_any_federation(digits, 3, 0), build_federation(digits, 3, seed=0)
    assert all(torch.equal(x.train_x, y.train_x) for x, y in zip(a.shards, b.shards))


@needs_mujoco
@pytest.mark.parametrize("protocol", [
    {"name": "feddrman", "rounds": 3, "n_clusters": 2, "rank": 4, "round_timeout_s": 30.0},
    {"name": "fedkd", "rounds": 5, "round_timeout_s": 30.0},  # devices that missed a delta resync
])
@pytest.mark.slow
def test_robot_protocols_under_churn_conserve_messages_and_replay(tmp_path_factory, protocol):
    """FedDRMan and FedKD (rollout-scored robot policies) under churn: every message accounted for,
    the same run twice."""
    from p2pfl.config import load_dict
    from p2pfl.sim.kernel import Simulation
    from tests.helpers import robot_scenario
    from tests.sim.test_dynamics_conservation import check_log

    root = tmp_path_factory.mktemp("demos")
    sc = robot_scenario(root, protocol, name="robot-churn", dynamics={"churn": {"offline": 0.4, "cycle_s": 4.0}})
    runs = []
    for _ in range(2):
        sim = Simulation(load_dict(sc))
        summary = sim.run()
        check_log(sim, summary)
        runs.append((summary, sim.recorder.events))
    assert runs[0] == runs[1]
    assert sum(runs[0][0]["dynamics"]["offline_periods_per_node"]) > 0
    if protocol["name"] == "fedkd":  # a device came back after missing a delta and asked for the mentee
        assert runs[0][0]["bytes_by_kind"]["resync"] > 0 and runs[0][0]["bytes_by_kind"]["resync_state"] > 0


@pytest.mark.slow
@needs_mujoco
def test_suites_split_their_demos_independently_and_whatever_their_position(tmp_path):
    """Each suite's Dirichlet split has its own stream, keyed by the suite's name: client k of two suites
    does not get the same share, and a suite's shards are the same alone and beside another suite."""
    from p2pfl.api import resolve
    from p2pfl.robotics.federation import build_robot_federation

    def shards(suites, per_suite=3):
        sc = resolve(_scenario(tmp_path, {"name": "fedavg", "rounds": 1}, suites=suites, per_suite=per_suite))
        fed = build_robot_federation(sc.data, sc.topology.n, seed=0)
        return {(s.source, k % per_suite): s.train_index.tolist() for k, s in enumerate(fed.shards)}

    pair = shards(("object", "goal"))
    counts = {suite: [len(pair[(suite, k)]) for k in range(3)] for suite in ("object", "goal")}
    assert counts["object"] != counts["goal"]
    alone = shards(("goal",))
    assert alone == {key: v for key, v in pair.items() if key[0] == "goal"}
    assert shards(("goal", "object")) == pair


@pytest.mark.slow
@needs_mujoco
def test_a_subspace_rank_not_below_the_batch_is_refused(tmp_path):
    """Eq. 6 with r >= N keeps every feature vector: plain feature matching, so it is refused."""
    from tests.helpers import robot_scenario

    sc = robot_scenario(tmp_path, {"name": "feddrman", "rounds": 1, "rank": 32})
    with pytest.raises(ConfigError, match=r"field 'protocol.rank': 32 is not below training.batch_size 32; .* "
                                          r"set protocol.rank below 32, e.g. 16"):
        p2pfl.run(sc, write=False)
    sc["protocol"]["sub_loss"] = False  # no subspace loss: the rank is unused
    assert p2pfl.run(sc, write=False).summary["protocol"] == "feddrman"
