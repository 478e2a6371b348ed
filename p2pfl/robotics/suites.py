"""Three LIBERO-like task suites on one MuJoCo table, written in MJCF (LIBERO, Liu et al. 2023).

Like LIBERO's, the suites differ in what varies:

* ``spatial``: two identical red cubes and a blue post; the instruction picks the cube by its
  relation to the post (left / right / in front of / behind) and it goes to the green zone.
* ``object``: four cubes of different colours in a row, arranged differently per task (as
  LIBERO-Object's per-task scenes); the instruction names which one goes to the zone.
* ``goal``: one fixed scene (red cube, blue cube, green and orange zones); different goals.

Each suite has its own table colour (a different environment), object poses are drawn from a
seeded RNG per episode, and every task has a success predicate on the simulator state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Layout", "Task", "SUITES", "TASKS", "get_task", "scene_xml", "CUBE_HALF", "ZONE_HALF", "IMAGE_SIZE"]

CUBE_HALF = 0.022  # cube half-size (m)
ZONE_HALF = 0.05  # target zone half-size (m)
WORKSPACE = 0.15  # objects and zones lie in [-WORKSPACE, WORKSPACE]^2
IMAGE_SIZE = 32  # agent-view RGB, square
RGBA = {
    "red": "0.9 0.1 0.1 1", "blue": "0.1 0.2 0.9 1", "yellow": "0.95 0.85 0.1 1", "purple": "0.6 0.1 0.8 1",
    "green": "0.1 0.75 0.2 1", "orange": "1.0 0.5 0.0 1", "post": "0.1 0.3 1.0 1",
}
TABLE_RGBA = {"spatial": "0.55 0.4 0.25 1", "object": "0.5 0.5 0.5 1", "goal": "0.75 0.75 0.85 1"}


@dataclass
class Layout:
    """Initial poses of one episode: cube xy, zone xy, post xy (spatial)."""

    cubes: dict[str, tuple[float, float]]
    zones: dict[str, tuple[float, float]]
    post: tuple[float, float] | None = None


@dataclass(frozen=True)
class Task:
    """One language-conditioned task: its suite, instruction, layout sampler and goal."""

    suite: str
    name: str
    instruction: str
    cube: str  # the object to move
    goal: str  # a zone name, or "stack:<cube>"
    sample: Callable[[np.random.Generator], Layout] = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"


def _far(points: list[tuple[float, float]], p: tuple[float, float], d: float) -> bool:
    return all(np.hypot(p[0] - q[0], p[1] - q[1]) >= d for q in points)


def _draw(rng: np.random.Generator, taken: list[tuple[float, float]], d: float, box: float = WORKSPACE) -> tuple[float, float]:
    for _ in range(1000):
        p = (float(rng.uniform(-box, box)), float(rng.uniform(-box, box)))
        if _far(taken, p, d):
            taken.append(p)
            return p
    raise RuntimeError("could not place an object without overlap")  # pragma: no cover


# ----------------------------------------------------------------------------- spatial
_REL = {"left": (-1, 0), "right": (1, 0), "front": (0, -1), "back": (0, 1)}
_REL_WORDS = {"left": "left of", "right": "right of", "front": "in front of", "back": "behind"}


def _spatial_sampler(rel: str) -> Callable[[np.random.Generator], Layout]:
    def sample(rng: np.random.Generator) -> Layout:
        post = (float(rng.uniform(-0.05, 0.05)), float(rng.uniform(-0.03, 0.05)))
        dx, dy = _REL[rel]
        cubes = {}
        for name, sign in (("cube_a", 1), ("cube_b", -1)):
            dist = rng.uniform(0.07, 0.1)
            jit = rng.uniform(-0.03, 0.03)
            cubes[name] = (post[0] + sign * (dx * dist + dy * jit), post[1] + sign * (dy * dist + dx * jit))
        taken = [post, *cubes.values()]
        zone = _draw(rng, taken, 0.11)
        return Layout(cubes=cubes, zones={"green": zone}, post=post)
    return sample


_OBJECT_SLOTS = ((-0.12, 0.07), (-0.04, 0.07), (0.04, 0.07), (0.12, 0.07))
#: Each object task has its own scene, as in LIBERO-Object: the colour order of the row of cubes.
_OBJECT_SCENES = {"red": ("red", "blue", "yellow", "purple"), "blue": ("yellow", "blue", "purple", "red"),
                  "yellow": ("purple", "red", "yellow", "blue"), "purple": ("blue", "yellow", "red", "purple")}


def _object_sampler(target: str) -> Callable[[np.random.Generator], Layout]:
    """LIBERO-Object-like: each task has its own arrangement of the four cubes in a row of slots
    (2 cm jitter each), the zone (like LIBERO's basket) near the front centre (2 cm jitter).

    We also tried a colour order shuffled per episode (the policy must then bind the colour word to
    pixels) and cubes anywhere on the table: a 32x32 ResNet-T-lite behaviour-cloned here reached
    11-22% and 0%, grasping whichever cube lay below it regardless of the instruction.
    """
    def sample(rng: np.random.Generator) -> Layout:
        j = lambda: float(rng.uniform(-0.02, 0.02))
        cubes = {c: (_OBJECT_SLOTS[k][0] + j(), _OBJECT_SLOTS[k][1] + j()) for k, c in enumerate(_OBJECT_SCENES[target])}
        return Layout(cubes=cubes, zones={"green": (j(), -0.09 + j())})
    return sample


def _goal_sampler(rng: np.random.Generator) -> Layout:
    j = lambda: float(rng.uniform(-0.025, 0.025))
    return Layout(cubes={"red": (-0.08 + j(), 0.06 + j()), "blue": (0.08 + j(), 0.06 + j())},
                  zones={"green": (-0.09 + j(), -0.08 + j()), "orange": (0.09 + j(), -0.08 + j())})


def _suites() -> dict[str, list[Task]]:
    spatial = [Task("spatial", rel, f"pick up the red cube {_REL_WORDS[rel]} the blue post and place it in the green zone",
                    "cube_a", "green", _spatial_sampler(rel)) for rel in ("left", "right", "front", "back")]
    obj = [Task("object", c, f"pick up the {c} cube and place it in the green zone", c, "green", _object_sampler(c))
           for c in ("red", "blue", "yellow", "purple")]
    goal = [
        Task("goal", "red_green", "put the red cube in the green zone", "red", "green", _goal_sampler),
        Task("goal", "blue_orange", "put the blue cube in the orange zone", "blue", "orange", _goal_sampler),
        Task("goal", "red_orange", "put the red cube in the orange zone", "red", "orange", _goal_sampler),
        Task("goal", "stack", "stack the red cube on the blue cube", "red", "stack:blue", _goal_sampler),
    ]
    return {"spatial": spatial, "object": obj, "goal": goal}


SUITES: dict[str, list[Task]] = _suites()
TASKS: dict[str, Task] = {t.id: t for ts in SUITES.values() for t in ts}


def get_task(task_id: str) -> Task:
    """``suite/name`` -> Task; a ValueError lists the valid ids."""
    try:
        return TASKS[task_id]
    except KeyError:
        raise ValueError(f"unknown task {task_id!r}; valid: {', '.join(TASKS)}") from None


def scene_xml(suite: str) -> str:
    """MJCF of a suite's scene: table, floating parallel gripper (mocap), cubes, zones, camera."""
    cubes = {"spatial": {"cube_a": "red", "cube_b": "red"}, "object": {c: c for c in ("red", "blue", "yellow", "purple")},
             "goal": {"red": "red", "blue": "blue"}}[suite]
    zones = {"spatial": ["green"], "object": ["green"], "goal": ["green", "orange"]}[suite]
    s = IMAGE_SIZE
    body = [f'<geom name="table" type="box" pos="0 0 -0.02" size="0.3 0.3 0.02" rgba="{TABLE_RGBA[suite]}"/>']
    for z in zones:
        body.append(f'<body name="zone_{z}" mocap="true" pos="0 0 0.0015"><geom type="box" size="{ZONE_HALF} {ZONE_HALF} 0.0015" '
                    f'rgba="{RGBA[z]}" contype="0" conaffinity="0"/></body>')
    if suite == "spatial":
        body.append(f'<body name="post" mocap="true" pos="0 0 0.035"><geom type="cylinder" size="0.018 0.035" rgba="{RGBA["post"]}" '
                    'contype="0" conaffinity="0"/></body>')
    for name, colour in cubes.items():
        body.append(f'<body name="{name}" pos="0 0 {CUBE_HALF}"><freejoint name="{name}"/><geom type="box" '
                    f'size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" rgba="{RGBA[colour]}" mass="0.05" friction="1 0.01 0.001"/></body>')
    body.append('<body name="gripper" mocap="true" pos="0 0 0.15"><geom type="box" size="0.03 0.012 0.012" rgba="0.2 0.2 0.2 1" '
                'contype="0" conaffinity="0"/></body>')
    for f in ("finger_l", "finger_r"):
        body.append(f'<body name="{f}" mocap="true" pos="0 0 0.12"><geom type="box" size="0.005 0.01 0.025" rgba="0.3 0.3 0.3 1" '
                    'contype="0" conaffinity="0"/></body>')
    return f"""<mujoco model="p2pfl_{suite}">
  <option timestep="0.01"/>
  <visual><global offwidth="{s}" offheight="{s}"/><quality shadowsize="0"/>
    <headlight ambient="0.6 0.6 0.6" diffuse="0.4 0.4 0.4" specular="0 0 0"/></visual>
  <worldbody>
    <light pos="0 0 1.5" dir="0 0 -1" castshadow="false" diffuse="0.3 0.3 0.3"/>
    <camera name="agentview" pos="0 -0.42 0.42" xyaxes="1 0 0 0 0.71 0.71" fovy="45"/>
    {chr(10).join('    ' + b for b in body)}
  </worldbody>
</mujoco>"""
