"""A MuJoCo environment per task and the scripted expert that demonstrates it.

Action: 4-D in [-1, 1]: gripper xyz velocity (x ``MAX_STEP_M`` per control step) and grip
(> 0 closes). The gripper is a floating parallel gripper (mocap body with two fingers). The grasp
is kinematic: closing within reach of a cube's centre attaches it, opening releases it to fall
under MuJoCo physics (a documented simplification of LIBERO's contact grasps, which keeps the
physics cheap on two CPU cores). Observations follow LIBERO's keys.

MuJoCo is imported through :func:`p2pfl.robotics.gl.import_mujoco` (GL backend check, triton
loaded first), when the first environment or scene is made, not when this module is imported.
"""

from __future__ import annotations

import atexit
import contextlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

from p2pfl.robotics.gl import gl_backend_error, import_mujoco, renderer
from p2pfl.robotics.suites import CUBE_HALF, IMAGE_SIZE, ZONE_HALF, Task, scene_xml

__all__ = ["RobotEnv", "Expert", "MAX_STEP_M", "CONTROL_SUBSTEPS", "PROPRIO_DIM", "ACTION_DIM", "mujoco_available"]

MAX_STEP_M = 0.02  # gripper displacement per control step at |action| = 1
CONTROL_SUBSTEPS = 4  # physics steps (0.01 s) per control step: a 25 Hz controller
PROPRIO_DIM = 5  # joint_states: gripper xyz (3); gripper_states: two finger openings (2)
ACTION_DIM = 4
OPEN, CLOSED = 0.03, 0.005  # finger offsets from the gripper centre (m)
HOME = np.array([0.0, -0.05, 0.15])
#: The gripper starts anywhere in HOME +- START_SPREAD (m). A wide start matters: from a nearly fixed
#: start, a behaviour-cloned policy learns to read the task off its own early displacement (which
#: only the expert's first steps cause) instead of off the instruction, and at test time, with no
#: displacement yet, heads for the average target ("copycat" causal confusion). Measured on the
#: object suite: 10-15% success with a +-2 cm start, the policy grasping the named cube no more
#: often than chance.
START_SPREAD = np.array([0.12, 0.06, 0.025])


def mujoco_available() -> Optional[str]:
    """None when MuJoCo imports and renders offscreen here; otherwise the reason it cannot.

    Checks the GL backend cheaply first (:func:`~p2pfl.robotics.gl.gl_backend_error`: no import
    when its library is missing), then renders one tiny scene.
    """
    reason = gl_backend_error()
    if reason is not None:
        return reason
    try:
        mujoco = import_mujoco()
        m = mujoco.MjModel.from_xml_string('<mujoco><visual><global offwidth="8" offheight="8"/></visual>'
                                           '<worldbody><geom type="sphere" size="0.1"/></worldbody></mujoco>')
        r = renderer(mujoco, m, 8, 8)
        d = mujoco.MjData(m)
        r.update_scene(d)
        r.render()
        _SCENES[("probe", 8)] = (m, r)  # never freed (see _scene)
        return None
    except Exception as err:  # UserError from the GL checks, context failures
        return " ".join(str(err).split())[:300]


_SCENES: dict = {}


def _close_renderers() -> None:
    """Free GL contexts at exit while the GL bindings still exist (avoids noisy __del__ errors)."""
    for _, r in _SCENES.values():
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            r.close()
    _SCENES.clear()


atexit.register(_close_renderers)


def _scene(suite: str, image_size: int):
    """One compiled model and one offscreen renderer per (suite, size), kept for the process.

    Renderers are never freed: destroying an OSMesa/EGL context while another is current
    corrupts later renders, and the models are tiny.
    """
    key = (suite, image_size)
    if key not in _SCENES:
        mujoco = import_mujoco()
        model = mujoco.MjModel.from_xml_string(scene_xml(suite))
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, image_size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, image_size)
        _SCENES[key] = (model, renderer(mujoco, model, image_size, image_size))
    return _SCENES[key]


@dataclass
class StepInfo:
    success: bool
    grasped: Optional[str]


class RobotEnv:
    """One task's scene: ``reset(seed)``, ``step(action)``, ``obs()``; renders agentview RGB."""

    def __init__(self, task: Task, image_size: int = IMAGE_SIZE) -> None:
        mujoco = import_mujoco()
        self._mj = mujoco
        self.task = task
        self.model, self.renderer = _scene(task.suite, image_size)
        self.data = mujoco.MjData(self.model)
        self._mocap = {n: self.model.body_mocapid[self.model.body(n).id] for n in
                       ["gripper", "finger_l", "finger_r", *[f"zone_{z}" for z in ("green", "orange") if self._has(f"zone_{z}")],
                        *(["post"] if self._has("post") else [])]}
        self.cubes = [self.model.body(i).name for i in range(self.model.nbody) if self.model.body(i).name and
                      self.model.body(i).name not in self._mocap and self.model.body(i).name not in ("world", "")]
        self._qadr = {c: self.model.jnt_qposadr[self.model.joint(c).id] for c in self.cubes}
        self._vadr = {c: self.model.jnt_dofadr[self.model.joint(c).id] for c in self.cubes}
        self.physics_time_s = 0.0

    def _has(self, name: str) -> bool:
        try:
            self.model.body(name)
            return True
        except KeyError:
            return False

    # --- state -------------------------------------------------------------------------------
    def reset(self, seed: int) -> dict:
        """New episode with object poses drawn from ``seed``; returns the first observation."""
        rng = np.random.default_rng(seed)
        lay = self.task.sample(rng)
        self._mj.mj_resetData(self.model, self.data)
        for c, (x, y) in lay.cubes.items():
            a = self._qadr[c]
            self.data.qpos[a : a + 7] = [x, y, CUBE_HALF, 1, 0, 0, 0]
        for z, (x, y) in lay.zones.items():
            self.data.mocap_pos[self._mocap[f"zone_{z}"]] = [x, y, 0.0015]
        if lay.post is not None:
            self.data.mocap_pos[self._mocap["post"]] = [lay.post[0], lay.post[1], 0.035]
        self.zones = dict(lay.zones)
        self.grip_pos = HOME + rng.uniform(-1.0, 1.0, 3) * START_SPREAD
        self.opening = OPEN
        self.grasped: Optional[str] = None
        self._grasp_offset = np.zeros(3)
        self._place_gripper()
        self._mj.mj_forward(self.model, self.data)
        self.physics_time_s = 0.0
        return self.obs()

    def cube_pos(self, name: str) -> np.ndarray:
        a = self._qadr[name]
        return self.data.qpos[a : a + 3].copy()

    def _place_gripper(self) -> None:
        p = self.grip_pos
        self.data.mocap_pos[self._mocap["gripper"]] = p + [0, 0, 0.03]
        self.data.mocap_pos[self._mocap["finger_l"]] = p + [-self.opening - 0.005, 0, 0.005]
        self.data.mocap_pos[self._mocap["finger_r"]] = p + [self.opening + 0.005, 0, 0.005]

    def step(self, action: np.ndarray) -> tuple[dict, StepInfo]:
        """Apply one control step (``CONTROL_SUBSTEPS`` physics steps)."""
        a = np.clip(np.asarray(action, dtype=np.float64), -1, 1)
        self.grip_pos = np.clip(self.grip_pos + a[:3] * MAX_STEP_M, [-0.22, -0.22, 0.005], [0.22, 0.22, 0.25])
        close = a[3] > 0
        if close and self.grasped is None and self.opening > CLOSED:
            for c in self.cubes:
                d = self.cube_pos(c) - self.grip_pos
                if np.hypot(d[0], d[1]) < 0.03 and abs(d[2]) < 0.025:
                    self.grasped, self._grasp_offset = c, d
                    break
        if not close and self.grasped is not None:
            self.grasped = None
        self.opening = CLOSED if close else OPEN
        self._place_gripper()
        for _ in range(CONTROL_SUBSTEPS):
            if self.grasped is not None:
                a0, v0 = self._qadr[self.grasped], self._vadr[self.grasped]
                self.data.qpos[a0 : a0 + 3] = self.grip_pos + self._grasp_offset
                self.data.qpos[a0 + 3 : a0 + 7] = [1, 0, 0, 0]
                self.data.qvel[v0 : v0 + 6] = 0
            self._mj.mj_step(self.model, self.data)
        self.physics_time_s += CONTROL_SUBSTEPS * self.model.opt.timestep
        return self.obs(), StepInfo(self.success(), self.grasped)

    def success(self) -> bool:
        """The task's goal predicate on the simulator state."""
        if self.grasped is not None:
            return False
        p = self.cube_pos(self.task.cube)
        if self.task.goal.startswith("stack:"):
            q = self.cube_pos(self.task.goal[6:])
            return bool(np.hypot(*(p[:2] - q[:2])) < CUBE_HALF and p[2] > q[2] + 1.5 * CUBE_HALF and p[2] < q[2] + 2.6 * CUBE_HALF)
        z = self.zones[self.task.goal]
        return bool(abs(p[0] - z[0]) < ZONE_HALF and abs(p[1] - z[1]) < ZONE_HALF and p[2] < 2 * CUBE_HALF)

    def proprio(self) -> np.ndarray:
        return np.array([*self.grip_pos, self.opening, self.opening], dtype=np.float32)

    def render(self) -> np.ndarray:
        """Agent-view RGB, uint8 (H, W, 3)."""
        self.renderer.update_scene(self.data, camera="agentview")
        return self.renderer.render().copy()

    def obs(self) -> dict:
        """LIBERO observation keys: agentview_rgb, joint_states, gripper_states."""
        p = self.proprio()
        return {"agentview_rgb": self.render(), "joint_states": p[:3], "gripper_states": p[3:]}



class Expert:
    """Scripted closed-loop expert: above cube, descend, close, lift, carry, lower, open, retreat."""

    #: distance (m) beyond which the proportional move saturates at |action| = 1
    saturate_m = 2.5 * MAX_STEP_M

    def __init__(self, env: RobotEnv, rng: np.random.Generator, noise: float = 0.1) -> None:
        self.env, self.rng, self.noise = env, rng, noise
        self.released = False

    def _goal_xyz(self) -> np.ndarray:
        g = self.env.task.goal
        if g.startswith("stack:"):
            q = self.env.cube_pos(g[6:])
            return np.array([q[0], q[1], q[2] + 2 * CUBE_HALF + 0.004])
        x, y = self.env.zones[g]
        return np.array([x, y, CUBE_HALF + 0.004])

    def act(self) -> np.ndarray:
        """A smooth funnel: the target height shrinks with the horizontal error, so the action is a
        continuous function of (object - gripper) and no decision hinges on sub-pixel precision
        (a 32x32 agent view has about 2 cm per pixel; see docs/robotics.md)."""
        e = self.env
        p = e.grip_pos
        cube = e.cube_pos(e.task.cube)
        grip = -1.0
        if self.released:
            target = np.array([p[0], p[1], 0.12])
        elif e.grasped != e.task.cube:
            err = np.hypot(*(p[:2] - cube[:2]))
            target = np.array([cube[0], cube[1], cube[2] + float(np.clip(1.5 * (err - 0.006), 0.0, 0.07))])
            if err < 0.015 and abs(p[2] - cube[2]) < 0.008:
                grip = 1.0
        else:
            grip = 1.0
            goal = self._goal_xyz()
            err = np.hypot(*(p[:2] - goal[:2]))
            tol = 0.008 if e.task.goal.startswith("stack:") else 0.02
            target = np.array([goal[0], goal[1], goal[2] + float(np.clip(1.5 * (err - tol / 2), 0.0, 0.08))])
            if p[2] < 0.06 and err > 0.03:
                target[:2] = p[:2]  # lift before carrying
            if err < tol and abs(p[2] - goal[2]) < 0.006:
                grip, self.released = -1.0, True
        move = np.clip((target - p) / self.saturate_m, -1, 1)  # proportional, saturating beyond saturate_m
        move = np.clip(move + self.noise * self.rng.standard_normal(3) * (np.abs(move) > 0.3), -1, 1)
        return np.array([*move, grip], dtype=np.float32)
