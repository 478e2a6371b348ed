"""The robot federation: demos -> per-device shards of packed samples, and rollout scoring.

Design: robotics is a plug-in dataset (``data.dataset: robotics`` with its partition kind
``robot_suites``, ``p2pfl.robotics.schema``), so every protocol gets ordinary shards (x = packed
observation, y = expert action). The federation scores a model for a device by closed-loop rollouts
on the device's suite (``evaluation``): a job the kernel runs once per ``rollout_key``, so that a
server scoring one global model for five devices rolls out once, scored and charged by ``report``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import torch
from torch import nn

from p2pfl.data.evaluation import JobEvaluation, JobReport, KeptResult
from p2pfl.data.shards import Federation, Shard
from p2pfl.errors import ConfigError, DataError
from p2pfl.learning.heldout import heldout_loss
from p2pfl.robotics.demos import Demo
from p2pfl.robotics.gl import require_gl
from p2pfl.robotics.policy import ObsLayout, pack_samples, resize_frames
from p2pfl.robotics.rollout import RolloutResult, combine_parts, rollout_parts, run_rollout_part, run_rollouts
from p2pfl.robotics.schema import RobotSuitesPartition
from p2pfl.seeding import stream

__all__ = ["RobotFederation", "RolloutReport", "build_robot_federation", "dirichlet_demo_split", "ROLLOUT_STEP_FLOPS",
           "LIBERO_STEP_FLOPS", "LIBERO_WRIST_STEP_FLOPS"]

#: Modelled FLOPs of one physics + render control step (4 physics steps, a 32x32 render), added
#: to the policy's forward FLOPs per step when rollouts are charged.
ROLLOUT_STEP_FLOPS = 2_000_000
#: A real LIBERO control step (25 physics steps, one 128 px agent-view render), measured in seconds by
#: ``analysis/bench/bench_libero.py`` and charged as FLOPs at the rate the same core runs the policy's forward
#: (batch 1, as rollouts run it): 109.5 ms x 1.86 GFLOP/s on this project's 2-core machines, about
#: 90 policy forwards per step.
LIBERO_STEP_FLOPS = 203_000_000
#: The same with the wrist camera rendered too (``data.partition.wrist``): LIBERO_STEP_FLOPS times the
#: ratio of the two steps' medians that the same script measured side by side (356.3 / 275.7 ms on a
#: loaded machine: a second 128 px render adds 29%).
LIBERO_WRIST_STEP_FLOPS = 262_000_000


@dataclass
class RolloutReport:
    score: float
    flops: int
    fields: dict


def dirichlet_demo_split(demo_task: np.ndarray, n_clients: int, alpha: float, *, rng: np.random.Generator) -> list[np.ndarray]:
    """Per task, demo shares over clients ~ Dirichlet(alpha); redrawn until every client has a demo."""
    tasks = np.unique(demo_task)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(n_clients)]
        for t in tasks:
            idx = rng.permutation(np.flatnonzero(demo_task == t))
            cuts = (np.cumsum(rng.dirichlet([alpha] * n_clients)) * len(idx)).round().astype(int)[:-1]
            for c, chunk in enumerate(np.split(idx, cuts)):
                parts[c].extend(int(i) for i in chunk)
        if all(parts):
            return [np.array(sorted(p), dtype=np.int64) for p in parts]
    raise DataError(f"could not give each of {n_clients} clients a demo with alpha={alpha}; add demos or clients")


@dataclass(frozen=True, eq=False)
class RobotFederation(Federation):
    """A Federation whose devices hold robot demos; scored by rollouts on their suite's tasks."""

    layout: ObsLayout = field(default_factory=ObsLayout)
    device_suites: tuple[str, ...] = ()
    suite_tasks: dict = field(default_factory=dict)  # suite -> tuple of task ids
    eval_episodes: int = 10
    horizon: int = 80
    horizons: dict = field(default_factory=dict)  # suite -> control steps, where not ``horizon``
    step_flops: int = ROLLOUT_STEP_FLOPS  # modelled cost of one environment step (physics and render)
    seed: int = 0
    make_env: Any = None
    best_of_last: int = 1  # k of the summary's success_best_of_last_k
    binarize_gripper: bool = False  # the gripper command sent as +1/-1 at rollout (LIBERO's policies)
    #: held-out validation samples (x, y) of every task (``val_demos_per_task``): never trained on, never scored
    validation: Optional[tuple[torch.Tensor, torch.Tensor]] = None
    renders: ClassVar[bool] = True  # rollouts render: workers are spawned, never forked

    @property
    def model_hint(self) -> ObsLayout:
        return self.layout

    @property
    def metric(self) -> str:
        return "success"

    def evaluation(self, device: int, model: nn.Module, forward_flops: int) -> JobEvaluation:
        """Rollouts of ``model`` on ``device``'s suite, once per (suite, weights); the success rate is the score."""
        suite = self.device_suites[device]
        fn, args = self.rollout_call(model, suite)

        def report(res: RolloutResult, cached: bool) -> JobReport:
            rep = self.report(res, suite, cached, forward_flops)
            return JobReport(rep.score, rep.flops, {k: v for k, v in rep.fields.items() if k not in ("suite", "cached")})

        key = self.rollout_key(model, suite)
        parts, combine = self.rollout_split(model, suite)
        return JobEvaluation(key=key, fn=fn, args=args, flops=self.rollout_flops_bound(suite, forward_flops),
                             report=report, what="rollout", log="rollout_success",
                             fields={"suite": suite, "per_task": None, "bc_test_loss": self.bc_test_loss(device, model)},
                             kept=KeptResult(self.rollout_digest(model, key), RolloutResult.to_json,
                                             RolloutResult.from_json), parts=parts, combine=combine)

    def validation_set(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """The validation demos' samples of every task (``data.partition.val_demos_per_task``), or None."""
        return self.validation

    def bc_test_loss(self, device: int, model: nn.Module, batch: int = 256) -> Optional[float]:
        """The behaviour-cloning loss of ``model`` (its ``loss``: the GMM negative log-likelihood of the expert
        actions, Eq. 4) on ``device``'s held-out demos, in eval mode: a reading for the experimenter beside the
        rollouts (logged with them; no protocol sees it, no compute charged). None where the device holds no
        test demos or the model has no ``loss``."""
        shard = self.shards[device]
        return heldout_loss(model, shard.test_x, shard.test_y, batch)

    def score_fields(self, curve: list[dict[str, Any]]) -> dict[str, Any]:
        """The success two ways, side by side: ``success_last_round`` (the curve's last point, the mean over
        devices at the last evaluation) and ``success_best_of_last_k`` (the best of the last ``best_of_last``
        evaluations, at ``success_best_round``: the paper's best of 10 checkpoints, evaluated every 5 of 50
        rounds). Evaluations whose mean is undefined (a model diverged) are left out.

        Resolution: a suite's rate from n rollouts on each of T tasks has binomial standard error
        sqrt(p(1-p)/(nT)), at most 0.5/sqrt(nT). Two methods differ by 10 points resolvably (95%, rollout
        noise alone) when 1.96 sqrt(2 x 0.25/(nT)) <= 0.10, i.e. nT >= 192: n = 48, about 50 per task, on our
        4-task suites (20 on LIBERO's 10 tasks). At n = 10, T = 4 one seed's difference has sd 11 points, and a
        3-seed t-interval on it is about +-28 (t = 4.3): the +-22 of our first report. Seed-to-seed training
        variance adds to this; episodes only remove the rollout part.

        Optimism: the best of k noisy evaluations of one policy exceeds its rate by about the standard
        error times E[max of k normals] (k = 5: 1.16, k = 10: 1.54): +12 points at n = 10, T = 4, p = 0.5, k = 10;
        +5 at n = 50. The paper scores its chosen checkpoint again on 20 fresh rollouts per task; here the
        same rollouts choose and score, so read ``success_best_of_last_k`` as an upper reading and
        ``success_last_round`` as the unbiased one.
        """
        points = [(p["round"], p["success_mean"]) for p in curve if p.get("success_mean") is not None]
        if not points:
            return {}
        last = points[-self.best_of_last:]
        best_round, best = max(reversed(last), key=lambda rv: rv[1])  # ties: the latest round
        return {"success_last_round": points[-1][1], "success_best_of_last_k": best, "success_best_round": best_round,
                "best_of_last_k": self.best_of_last}

    def stats(self) -> dict:
        return {"dataset": self.dataset, "partition": self.partition, "input_shape": list(self.input_shape),
                "samples_per_device": [int(s.train_y.shape[0]) for s in self.shards],
                "test_samples_per_device": [int(s.test_y.shape[0]) for s in self.shards],
                "suite_per_device": list(self.device_suites),
                "true_cluster_per_device": list(self.true_clusters), "n_clusters": self.n_clusters,
                "tasks_per_suite": {k: list(v) for k, v in self.suite_tasks.items()},
                **({"validation_samples": int(self.validation[1].shape[0])} if self.validation is not None else {})}

    def rollout_key(self, model: nn.Module, suite: str) -> tuple[str, str]:
        """What identifies a rollout: the suite and a hash of the model's weights."""
        h = hashlib.sha1()
        for v in model.state_dict().values():
            h.update(v.detach().cpu().numpy().tobytes())
        return suite, h.hexdigest()

    def rollout_digest(self, model: nn.Module, key: tuple[str, str]) -> str:
        """Everything that decides a rollout's result, hashed (the name of its kept result): the dataset, the
        suite and the weights (``key``), the policy's class and layout, and the rollouts' tasks, episodes,
        horizon, seed, gripper binarization and, where LIBERO's meshes are simplified, ``render_lod``."""
        suite, weights = key
        what = [self.dataset, suite, weights, type(model).__qualname__, repr(self.layout),
                list(self.suite_tasks[suite]), self.eval_episodes, self.horizon_of(suite), self.seed,
                self.binarize_gripper]
        lod = getattr(self.make_env, "lod", 0.0)
        if lod:  # simplified meshes draw other images (appended only then: whole-mesh digests stay as they were)
            what.append(["render_lod", lod])
        return hashlib.sha1(json.dumps(what).encode("utf-8")).hexdigest()

    def rollout_call(self, model: nn.Module, suite: str) -> tuple[Any, tuple[Any, ...]]:
        """The rollouts of ``model`` on ``suite`` as a job: ``(run_rollouts, args)``, picklable."""
        return run_rollouts, (model, self.layout, self.suite_tasks[suite], self.eval_episodes,
                              self.horizon_of(suite), self.seed, self.make_env, self.binarize_gripper)

    def rollout_split(self, model: nn.Module, suite: str) -> tuple[tuple[tuple[Any, tuple[Any, ...]], ...], Any]:
        """``rollout_call``'s rollouts as parts (``rollout_parts``: at most ``EPISODES_PER_PART`` episodes of one
        task each) and how to combine them, where episodes run one at a time (LIBERO: a scoring then uses every
        core, to the same result); ``((), None)`` elsewhere."""
        if not getattr(self.make_env, "one_env_per_task", False):
            return (), None
        tasks = tuple(self.suite_tasks[suite])
        parts = tuple((run_rollout_part, (model, self.layout, ti, tid, eps, self.horizon_of(suite), self.seed,
                                          self.make_env, self.binarize_gripper))
                      for ti, tid, eps in rollout_parts(tasks, self.eval_episodes))
        return parts, functools.partial(combine_parts, tasks)

    def horizon_of(self, suite: str) -> int:
        """Control steps per episode on ``suite`` (its own, e.g. LIBERO's, else the partition's)."""
        return self.horizons.get(suite, self.horizon)

    def rollout_flops_bound(self, suite: str, forward_flops: int) -> int:
        """The most the rollouts of one model on ``suite`` can cost (every episode to its horizon): the job's
        size for the executor's load balance, so a rollout is not queued behind training as if free."""
        steps = len(self.suite_tasks[suite]) * self.eval_episodes * self.horizon_of(suite)
        return steps * (forward_flops + self.step_flops)

    def report(self, res: RolloutResult, suite: str, cached: bool, forward_flops: int) -> RolloutReport:
        """The score of a rollout result; its FLOPs charged unless ``cached`` (another device's score already paid)."""
        flops = 0 if cached else res.steps * (forward_flops + self.step_flops)
        fields: dict[str, Any] = {"suite": suite, "per_task": res.per_task, "cached": cached}
        if res.reach:  # progress, from environments that report it (LIBERO-Object)
            fields.update(reach=res.reach, grasp=res.grasp)
        if res.lift:
            fields.update(lift=res.lift, carry=res.carry)
        return RolloutReport(res.success, flops, fields)


def check_render_lod(attrs: dict, want: float, path: Path) -> None:
    """One-line error where a LIBERO demo file was rendered with other meshes than the rollouts will draw
    (its ``data`` attribute ``render_lod``, absent: LIBERO's whole meshes): a policy would be scored on
    images unlike its training images."""
    have = float(attrs.get("render_lod", 0.0))
    if have != want:
        raise DataError(f"{path}: demos rendered with render_lod {have:g}, the scenario draws rollouts with "
                        f"data.partition.render_lod {want:g}; set render_lod: {have:g}, or record demos with "
                        f"python -m p2pfl.robotics.libero_demos --lod {want:g}")


def check_joint_noise(attrs: dict, want: float, path: Path) -> None:
    """One-line error where a LIBERO demo file was recorded from other starting joints than the scenario says
    (its ``data`` attribute ``joint_noise``, absent: 0, the arm's default pose)."""
    have = float(attrs.get("joint_noise", 0.0))
    if have != want:
        raise DataError(f"{path}: demos recorded with joint_noise {have:g}, the scenario says "
                        f"data.partition.joint_noise {want:g}; set joint_noise: {have:g}, or record demos with "
                        f"python -m p2pfl.robotics.libero_demos --joint-noise {want:g} into another data.root")


def _suite_demos(p: RobotSuitesPartition, suite: str, root: Optional[str]) -> list[tuple[str, str, list[Demo], list[Demo]]]:
    """[(task id, instruction, demos, validation demos)] of a suite, from the generator's cache or LIBERO files
    (validation demos: the ``val_demos_per_task`` after a file's first ``demos_per_task``; none when generated)."""
    from p2pfl.robotics.demos import read_demo_file, task_demos

    if p.source == "generated":
        from p2pfl.robotics.suites import SUITES  # suite names: checked by the schema

        out: list[tuple[str, str, list[Demo], list[Demo]]] = []
        for t in SUITES[suite]:
            df = task_demos(t.id, p.demos_per_task, root)
            out.append((t.id, df.instruction, df.demos, []))
        return out
    files = p.libero_tasks.get(suite)
    if not files:
        raise ConfigError(f"data.partition.libero_tasks: no demo files listed for suite {suite!r}")
    from p2pfl.robotics.libero import libero_task_names

    names = libero_task_names(suite)
    for f in files:
        if Path(f).stem.removesuffix("_demo") not in names:
            raise ConfigError(f"data.partition.libero_tasks: {f!r} is not a task of {suite} (its file name "
                              f"must be <task>_demo.hdf5); tasks: {', '.join(names)}")
    out = []
    for f in files:
        path = Path(f) if root is None else Path(root).expanduser() / f
        want = p.demos_per_task + p.val_demos_per_task
        df = read_demo_file(path, max_demos=want, wrist=p.wrist)
        check_render_lod(df.attrs, p.render_lod, path)
        check_joint_noise(df.attrs, p.joint_noise, path)
        if p.val_demos_per_task and len(df.demos) < want:
            raise DataError(f"{path}: {len(df.demos)} demos, data.partition.demos_per_task + val_demos_per_task "
                            f"= {want} needed; record more (libero_demos --demos {want}) or lower val_demos_per_task")
        out.append((f"{suite}/{Path(f).stem.removesuffix('_demo')}", df.instruction, df.demos[:p.demos_per_task],
                    df.demos[p.demos_per_task:]))
    return out


def _step_flops(source: str, wrist: bool) -> int:
    if source != "libero":
        return ROLLOUT_STEP_FLOPS
    return LIBERO_WRIST_STEP_FLOPS if wrist else LIBERO_STEP_FLOPS


def build_robot_federation(spec: Any, n_devices: int, *, seed: int) -> RobotFederation:
    """One shard per device: device i is client i % clients_per_suite of suite i // clients_per_suite.

    Raises a one-line ``UserError`` before generating or loading any demo when MuJoCo cannot
    render here (rollouts, the federation's score, always render; generated demos do too).
    """
    p: RobotSuitesPartition = spec.partition
    if p.clients_per_suite > p.reference_clients:
        raise ConfigError(f"data.partition.clients_per_suite={p.clients_per_suite} exceeds reference_clients={p.reference_clients}")
    if n_devices != len(p.suites) * p.clients_per_suite:
        raise ConfigError(f"robot_suites needs {len(p.suites)} suites x {p.clients_per_suite} clients = "
                          f"{len(p.suites) * p.clients_per_suite} devices; the topology has {n_devices}")
    require_gl()
    if p.source == "libero":
        from p2pfl.robotics.libero import require_libero

        require_libero()  # before any demo file is read
    shards, suites, clusters, tasks_of, layout = [], [], [], {}, None
    instructions: dict[str, str] = {}  # task id -> the demo file's instruction (training and rollouts)
    make_env = None
    val_x: list[np.ndarray] = []
    val_y: list[np.ndarray] = []
    for c, suite in enumerate(p.suites):
        items = _suite_demos(p, suite, spec.root)
        tasks_of[suite] = tuple(t for t, _, _, _ in items)
        instructions.update((t, instr) for t, instr, _, _ in items)
        d0 = items[0][2][0]
        lay = ObsLayout(history=p.history, image=p.image_px, joint=d0.joint_states.shape[1],
                        gripper=d0.gripper_states.shape[1], action=d0.actions.shape[1], wrist=p.wrist)
        if layout is not None and lay != layout:
            raise DataError(f"suite {suite!r} has observation layout {lay}, others {layout}; suites must share one robot")
        layout = lay
        demo_x, demo_y, demo_task = [], [], []
        for ti, (_, instr, demos, val) in enumerate(items):
            for d in demos:
                demo_x.append(_packed(lay, d, instr))
                demo_y.append(d.actions.astype(np.float32))
                demo_task.append(ti)
            val_x.extend(_packed(lay, d, instr) for d in val)
            val_y.extend(d.actions.astype(np.float32) for d in val)
        # A stream keyed by the suite's name: a suite's shards are identical in Table I (alone) and
        # in every cross-suite setting, whatever its position in ``suites`` (the paper reuses the
        # 5-client shards), and suites draw independently: one stream shared by every suite gave
        # client k of every suite the same task mix and sample count, so CUA could group clients by
        # data size across suites (issue 14).
        rng = stream(seed, f"robot.partition.{suite}")
        demo_task_a = np.array(demo_task)
        # held-out demos per task for a BC-loss test set (rollouts are the real score)
        test_mask = np.zeros(len(demo_task_a), bool)
        for t in np.unique(demo_task_a):
            idx = rng.permutation(np.flatnonzero(demo_task_a == t))
            test_mask[idx[: max(1, math.floor(spec.test_fraction * len(idx)))]] = True
        train_ids, test_ids = np.flatnonzero(~test_mask), np.flatnonzero(test_mask)
        parts = dirichlet_demo_split(demo_task_a[train_ids], p.reference_clients, p.alpha, rng=rng)
        for k in range(p.clients_per_suite):
            tr = train_ids[parts[k]]
            own = set(demo_task_a[tr].tolist())
            te = np.array([i for i in test_ids if demo_task_a[i] in own], dtype=np.int64)
            cat = lambda ids, arr: torch.from_numpy(np.concatenate([arr[i] for i in ids])) if len(ids) else torch.zeros(0)
            shards.append(Shard(cat(tr, demo_x), cat(tr, demo_y), cat(te, demo_x), cat(te, demo_y), c, tr, te, suite))
            suites.append(suite)
            clusters.append(c)
    assert layout is not None  # p.suites has at least one suite (schema: min_length=1)
    if p.source == "libero":
        from p2pfl.robotics.libero import check_layout, libero_env_factory

        make_env = libero_env_factory(layout.image, instructions, wrist=layout.wrist, lod=p.render_lod)
        first = tasks_of[p.suites[0]][0]
        check_layout(make_env, first, layout.joint, layout.gripper, layout.action)
    validation = (torch.from_numpy(np.concatenate(val_x)), torch.from_numpy(np.concatenate(val_y))) if val_x else None
    return RobotFederation(dataset="robotics", shards=tuple(shards), num_classes=0, input_shape=(layout.width,),
                           true_clusters=tuple(clusters), partition="robot_suites", task="robotics", layout=layout,
                           device_suites=tuple(suites), suite_tasks=tasks_of, eval_episodes=p.eval_episodes,
                           horizon=p.horizon, horizons=dict(p.horizons), seed=seed, make_env=make_env,
                           step_flops=_step_flops(p.source, layout.wrist), best_of_last=p.best_of_last,
                           binarize_gripper=bool(p.binarize_gripper), validation=validation)


def _packed(layout: ObsLayout, d: Demo, instruction: str) -> np.ndarray:
    """Demo ``d``'s packed samples (its frames resized to the layout's image size)."""
    wrist = None if d.eye_in_hand_rgb is None else resize_frames(d.eye_in_hand_rgb, layout.image)
    return pack_samples(layout, resize_frames(d.agentview_rgb, layout.image), d.joint_states, d.gripper_states,
                        instruction, wrist)
