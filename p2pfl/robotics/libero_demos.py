"""Scripted demonstrations recorded in real LIBERO environments, written in LIBERO's own hdf5 format.

    python -m p2pfl.robotics.libero_demos --suite libero_object --demos 20 --noise 0.2 --out ~/.cache/p2pfl/libero

The expert (LIBERO-Object's "pick up the X and place it in the basket") reads the object's and the
basket's poses from the environment and drives the end effector through OSC_POSE position deltas:
above the object, down, grasp, up, over the basket, down, release. An episode counts only when
LIBERO's own goal check (``done``) fires; failed attempts are discarded and the success rate is
reported. Attempt k starts from a placement drawn by LIBERO's own reset seeded with
``DEMO_SEED + k``, not from the task's 50 fixed initial states: those stay unseen for evaluation
(rollouts start from them), as LIBERO's human demonstrations were collected apart from them.

Noise injection (DART, Laskey et al., CoRL 2017): with ``noise`` > 0 the arm executes the expert's
action plus Gaussian noise on its translation, and the expert's own action is recorded beside it as
``expert_actions`` (``actions`` stays what was executed, so a demo replays from its ``init_state``).
A noiseless expert only ever visits centred states, and a cloned policy that drifts 2 cm off the
object never saw how to come back (measured: it closed its gripper beside the can); the noise puts
such states in the demos, labelled with the expert's correction. Training reads ``expert_actions``
where a file has them.

Files carry what LIBERO's dataset files carry: ``data`` attributes ``problem_info``, ``env_args``, ``bddl_file_name``, ``bddl_file_content``, ``macros_image_convention``, ``num_demos``
and ``total`` (and ours: ``render_lod``, ``joint_noise`` and ``noise``, how the file was recorded; a scenario's
``data.partition.render_lod`` and ``joint_noise`` must match them); per demo ``num_samples``, ``model_file`` and ``init_state`` and the datasets
``actions``, ``expert_actions``, ``states``, ``robot_states``, ``rewards``, ``dones`` and ``obs/{agentview_rgb,
eye_in_hand_rgb, joint_states, gripper_states, ee_pos, ee_ori, ee_states}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2pfl.errors import DataError
from p2pfl.robotics.libero import holds, object_of, prepare_renders
from p2pfl.robotics.schema import LIBERO_HORIZONS

#: Seed of a recording's first attempt (LIBERO's reset draws the placement); rollouts use the fixed
#: initial states instead, so no evaluation episode starts where a demonstration did.
DEMO_SEED = 10_000

__all__ = ["ObjectExpert", "RecordResult", "record_task", "object_of"]

_GAIN = 12.0  # action per metre of position error (OSC_POSE maps 1.0 to 5 cm per step)
_GRASP_STEPS = 12  # lift after this many closing steps if the fingers never both touch the object
_CLOSE_DZ = 0.02  # close the gripper this far above the object's centre (m)
_ABOVE, _CARRY, _RELEASE = 0.10, 0.28, 0.18  # heights above the object / the basket (m)


@dataclass
class ObjectExpert:
    """A phase machine over the environment's object and basket poses (ground truth the expert may read:
    it stands in for a human demonstrator).

    Every switch that changes the gripper or starts the lift fires on an observable state while the
    arm is still moving: close once the end effector is within ``_CLOSE_DZ`` of the object's centre
    height, lift once both fingers touch the object. A switch after a wait in a still state (the
    first recorder closed after the descent stalled for 5 steps and lifted after 12 closing steps)
    gives a memoryless policy identical observations with different actions, and the cloned policy
    then stays at that state (measured: it pushed down with the gripper open until the horizon).
    """

    obj: str
    phase: int = 0
    count: int = 0
    last: Any = None  # the end effector's previous position (a descent that stalls on a tall object grasps)

    def act(self, o: dict[str, np.ndarray], grasped: bool = False) -> np.ndarray:
        """The action for observation ``o``; ``grasped``: both fingers touch the object (from the env)."""
        eef, p, basket = o["robot0_eef_pos"], o[f"{self.obj}_1_pos"], o["basket_1_pos"]
        if self.phase == 1:
            still = self.last is not None and np.linalg.norm(eef - self.last) < 0.0015
            self._next_if(eef[2] <= p[2] + _CLOSE_DZ or np.linalg.norm(p - eef) < 0.01 or still)
        elif self.phase == 2:
            self.count += 1
            self._next_if(grasped or self.count > _GRASP_STEPS)
        grip = 1.0 if 2 <= self.phase <= 5 else -1.0
        if self.phase == 0:
            target = p + [0, 0, _ABOVE]
            self._next_if(np.linalg.norm(target - eef) < 0.012)
        elif self.phase in (1, 2):
            target = p
        elif self.phase == 3:
            target = np.array([eef[0], eef[1], basket[2] + _CARRY])
            self._next_if(abs(target[2] - eef[2]) < 0.02)
        elif self.phase == 4:
            target = basket + [0, 0, _CARRY]
            self._next_if(np.linalg.norm(target[:2] - eef[:2]) < 0.015)
        elif self.phase == 5:
            target = basket + [0, 0, _RELEASE]
            self._next_if(abs(target[2] - eef[2]) < 0.02)
        else:
            target = eef
        self.last = np.array(eef)
        a = np.zeros(7)
        a[:3] = np.clip((np.asarray(target) - eef) * _GAIN, -1.0, 1.0)
        a[6] = grip
        return a

    def _next_if(self, reached: Any) -> None:
        if reached:
            self.phase, self.count = self.phase + 1, 0


@dataclass
class RecordResult:
    path: Path
    demos: int
    attempts: int
    steps: list[int] = field(default_factory=list)

    @property
    def success_rate(self) -> float:
        return self.demos / self.attempts if self.attempts else 0.0


def _quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """robosuite's (x, y, z, w) quaternion as an axis-angle 3-vector (LIBERO's ``ee_ori``)."""
    w = float(np.clip(q[3], -1.0, 1.0))
    s = np.sqrt(max(1.0 - w * w, 0.0))
    angle = 2.0 * np.arccos(w)
    return np.zeros(3) if s < 1e-8 else np.asarray(q[:3]) / s * angle


def record_task(suite: str, task_index: int, n: int, out: Path, *, camera_px: int = 128,
                max_attempts: int | None = None, noise: float = 0.0, joint_noise: float = 0.0,
                lod: float = 0.0, progress: Any = None) -> RecordResult:
    """Record ``n`` successful expert episodes of one task (attempt k: LIBERO's reset seeded ``DEMO_SEED + k``;
    ``noise``: std of the Gaussian added to the executed translation; ``joint_noise``: std (rad) of the
    Gaussian added to the arm's starting joint positions, as LIBERO's fixed initial states carry about
    0.02; both drawn from a stream seeded like the reset; ``lod``: the visual meshes drawn simplified within
    this many metres, :mod:`p2pfl.robotics.lod`, recorded as the file's ``render_lod``)."""
    import h5py
    from libero.libero.envs import OffScreenRenderEnv

    from p2pfl.robotics.libero import bddl_path, libero_benchmark

    bench = libero_benchmark(suite)
    task = bench.get_task(task_index)
    obj = object_of(task.name)
    bddl = bddl_path(task)
    env_kwargs = {"bddl_file_name": bddl, "camera_heights": camera_px, "camera_widths": camera_px,
                  "camera_names": ["agentview", "robot0_eye_in_hand"]}
    env = OffScreenRenderEnv(**env_kwargs)
    horizon = LIBERO_HORIZONS[suite]
    path = out / f"{task.name}_demo.hdf5"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    attempts, kept, steps = 0, 0, []
    try:
        with h5py.File(tmp, "w") as f:
            g = f.create_group("data")
            total = 0
            while kept < n and attempts < (max_attempts or 2 * n):
                k = attempts
                attempts += 1
                env.seed(DEMO_SEED + k)
                o = env.reset()
                if prepare_renders(env.env, lod):  # the reset's images were drawn with whole meshes
                    o = env.env._get_observations(force_update=True)
                rng = np.random.default_rng(DEMO_SEED + k)
                init_state = env.env.sim.get_state().flatten()
                if joint_noise > 0:  # the arm's start perturbed as in LIBERO's fixed initial states
                    arm = 1 + np.asarray(env.env.robots[0]._ref_joint_pos_indexes)  # flattened state: time, qpos, qvel
                    init_state[arm] += rng.normal(0.0, joint_noise, arm.size)
                    o = env.set_init_state(init_state)
                expert = ObjectExpert(obj)
                rec: dict[str, list] = {key: [] for key in ("actions", "expert_actions", "states", "robot_states",
                                                            "agentview_rgb",
                                                            "eye_in_hand_rgb", "joint_states", "gripper_states",
                                                            "ee_pos", "ee_ori")}
                done = False
                for _ in range(horizon):
                    a = expert.act(o, grasped=holds(env, obj))
                    ori = _quat_to_axis_angle(o["robot0_eef_quat"])
                    rec["states"].append(env.env.sim.get_state().flatten())
                    rec["robot_states"].append(np.concatenate([o["robot0_gripper_qpos"], o["robot0_eef_pos"],
                                                               o["robot0_eef_quat"]]))
                    rec["agentview_rgb"].append(o["agentview_image"])
                    rec["eye_in_hand_rgb"].append(o["robot0_eye_in_hand_image"])
                    rec["joint_states"].append(o["robot0_joint_pos"])
                    rec["gripper_states"].append(o["robot0_gripper_qpos"])
                    rec["ee_pos"].append(o["robot0_eef_pos"])
                    rec["ee_ori"].append(ori)
                    rec["expert_actions"].append(a)
                    if noise > 0:
                        a = a.copy()
                        a[:3] = np.clip(a[:3] + rng.normal(0.0, noise, 3), -1.0, 1.0)
                    rec["actions"].append(a)
                    o, _, done, _ = env.step(a)
                    if done:
                        break
                if progress is not None:
                    progress(f"{task.name}: attempt {attempts}, {'success' if done else 'failed'} "
                             f"({kept + done}/{n} kept)")
                if not done:
                    continue
                t = len(rec["actions"])
                d = g.create_group(f"demo_{kept}")
                d.attrs["num_samples"] = t
                d.attrs["model_file"] = env.env.sim.model.get_xml()
                d.attrs["init_state"] = init_state
                for key in ("actions", "expert_actions", "states", "robot_states"):
                    d.create_dataset(key, data=np.asarray(rec[key], np.float64))
                rewards = np.zeros(t, np.uint8)
                rewards[-1] = 1
                d.create_dataset("rewards", data=rewards)
                d.create_dataset("dones", data=rewards.copy())
                og = d.create_group("obs")
                for key in ("agentview_rgb", "eye_in_hand_rgb"):
                    og.create_dataset(key, data=np.asarray(rec[key], np.uint8), compression="gzip", compression_opts=4)
                for key in ("joint_states", "gripper_states", "ee_pos", "ee_ori"):
                    og.create_dataset(key, data=np.asarray(rec[key], np.float64))
                og.create_dataset("ee_states", data=np.concatenate([np.asarray(rec["ee_pos"]),
                                                                    np.asarray(rec["ee_ori"])], axis=1))
                kept += 1
                total += t
                steps.append(t)
            problem = {"problem_name": env.problem_name, "domain_name": env.domain_name,
                       "language_instruction": env.language_instruction}
            g.attrs["problem_info"] = json.dumps(problem)
            g.attrs["env_args"] = json.dumps({"type": 1, "env_name": env.problem_name, "problem_name": env.problem_name,
                                              "bddl_file": bddl, "env_kwargs": {**env_kwargs, "controller": "OSC_POSE",
                                                                                "control_freq": 20}})
            g.attrs["bddl_file_name"] = bddl
            g.attrs["bddl_file_content"] = Path(bddl).read_text()
            g.attrs["macros_image_convention"] = "opengl"  # images as robosuite renders them (LIBERO's datasets too)
            g.attrs["num_demos"] = kept
            g.attrs["total"] = total
            g.attrs["render_lod"] = float(lod)  # ours: the meshes the images were drawn with (0: LIBERO's whole)
            g.attrs["joint_noise"] = float(joint_noise)  # ours: the arm's start perturbed (data.partition.joint_noise)
            g.attrs["noise"] = float(noise)  # ours: DART's noise on the executed translation
        if kept == 0:
            raise DataError(f"{suite}/{task.name}: the scripted expert failed all {attempts} attempts")
        os.replace(tmp, path)  # with fewer than n demos where the attempts ran out (the result says so)
    finally:
        env.close()
        if tmp.exists():
            tmp.unlink()
    return RecordResult(path, kept, attempts, steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="libero_object", choices=["libero_object"])
    ap.add_argument("--tasks", default="all", help="comma-separated task indices (0-9), or all")
    ap.add_argument("--demos", type=int, default=20, help="successful demos per task")
    ap.add_argument("--attempts", type=int, default=None, help="attempts per task (default: 2 x demos)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="std of the noise on the executed translation (DART; the expert's labels are kept)")
    ap.add_argument("--joint-noise", type=float, default=0.0,
                    help="std (rad) of the noise on the arm's starting joints (LIBERO's initial states: about 0.02)")
    ap.add_argument("--lod", type=float, default=0.0,
                    help="draw the visual meshes simplified within this many metres (p2pfl.robotics.lod; 0: whole); "
                         "a scenario reads the demos with the same data.partition.render_lod")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if not 0.0 <= a.lod <= 0.01:
        print(f"--lod {a.lod}: give metres in [0, 0.01] (0.0005 draws within half a millimetre)", file=sys.stderr)
        return 2
    from p2pfl.robotics.gl import require_gl
    from p2pfl.robotics.libero import libero_available

    require_gl()
    reason = libero_available()
    if reason is not None:
        print(f"needs LIBERO: pip install -e '.[libero]' ({reason})", file=sys.stderr)
        return 2
    indices = range(10) if a.tasks == "all" else [int(t) for t in a.tasks.split(",")]
    kept = tried = 0
    for i in indices:
        try:
            r = record_task(a.suite, i, a.demos, a.out.expanduser(), max_attempts=a.attempts, noise=a.noise,
                            joint_noise=a.joint_noise, lod=a.lod,
                            progress=lambda s: print(s, flush=True))
        except DataError as err:  # every attempt failed: no file for this task
            print(err, flush=True)
            tried += a.attempts or 2 * a.demos
            continue
        kept, tried = kept + r.demos, tried + r.attempts
        print(f"{r.path.name}: {r.demos} demos in {r.attempts} attempts ({100 * r.success_rate:.0f}%), "
              f"{int(np.mean(r.steps))} steps on average", flush=True)
    print(f"scripted expert: {kept} successes in {tried} attempts ({100 * kept / max(tried, 1):.1f}%) over "
          f"{len(indices)} tasks")
    return 0 if kept else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
