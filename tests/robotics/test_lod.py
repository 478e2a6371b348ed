"""Simplified visual meshes: fewer triangles from original corners, seams kept, physics untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pfl.errors import ConfigError, DataError
from p2pfl.robotics.federation import check_render_lod
from p2pfl.robotics.lod import simplified_meshes, simplify_mesh, simplify_visual_meshes

from .conftest import needs_mujoco

pytest.importorskip("meshoptimizer", reason="needs meshoptimizer (pip install -e '.[test]')")

pytestmark = pytest.mark.robotics


def _grid(n: int, seam: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The unit square in the z = 0 plane as 2 n^2 triangles stored as LIBERO's meshes are (three vertices and
    three texture coordinates per triangle); texture coordinates (x, y), or (x + 0.25, y) right of ``seam``."""
    step = 1.0 / n
    verts, uvs = [], []
    for i in range(n):
        for j in range(n):
            x0, y0 = i * step, j * step
            shift = 0.25 if seam is not None and x0 >= seam else 0.0
            for tri in (((x0, y0), (x0 + step, y0), (x0, y0 + step)),
                        ((x0 + step, y0), (x0 + step, y0 + step), (x0, y0 + step))):
                for x, y in tri:
                    verts.append((x, y, 0.0))
                    uvs.append((x + shift, y))
    v, t = np.array(verts), np.array(uvs)
    face = np.arange(len(v)).reshape(-1, 3)
    return v, face, t, face.copy()


def _areas_and_normals(v: np.ndarray, corners: np.ndarray, face: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = v[face.reshape(-1)[corners]]
    cross = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    return 0.5 * np.linalg.norm(cross, axis=1), cross


def test_a_flat_square_collapses_to_two_triangles_of_its_corners_with_its_area_and_winding():
    v, face, t, ft = _grid(8)
    out = simplify_mesh(v, face, t, ft, 1e-4)
    assert out.shape == (2, 3)
    area, normal = _areas_and_normals(v, out, face)
    assert area.sum() == pytest.approx(1.0)
    assert (normal[:, 2] > 0).all()  # every triangle still faces +z
    corners = {tuple(p) for p in v[face.reshape(-1)[out.reshape(-1)]]}
    assert corners <= {(0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, 0.0)}


def test_a_texture_seam_stays_a_seam():
    v, face, t, ft = _grid(8, seam=0.5)
    out = simplify_mesh(v, face, t, ft, 1e-4)
    area, _ = _areas_and_normals(v, out, face)
    assert area.sum() == pytest.approx(1.0)
    assert len(out) == 4  # two triangles a chart
    pos = v[face.reshape(-1)[out]]
    uv = t[ft.reshape(-1)[out]]
    chart = np.round(uv[..., 0] - pos[..., 0], 9)  # 0 left of the seam, 0.25 right of it
    assert set(chart.ravel()) == {0.0, 0.25}
    assert (chart == chart[:, :1]).all()  # no triangle samples both charts
    assert np.allclose(uv[..., 1], pos[..., 1])


def test_a_curved_surface_keeps_more_triangles_the_smaller_the_error():
    v, face, t, ft = _grid(16)
    v = v.copy()
    v[:, 2] = 0.05 * np.sin(3 * v[:, 0]) * np.cos(2 * v[:, 1])
    counts = [len(simplify_mesh(v, face, t, ft, e)) for e in (1e-6, 1e-4, 1e-2)]
    assert 512 >= counts[0] > counts[1] > counts[2] >= 2


# A free box that falls and collides (its collision mesh, shared by a visual geom, is never simplified); a
# visual-only sphere mesh on the world body, and one on a body carrying a camera.
_XML = """<mujoco><asset>
  <mesh name="box" vertex="-1 -1 -1 1 -1 -1 -1 1 -1 1 1 -1 -1 -1 1 1 -1 1 -1 1 1 1 1 1" scale="0.05 0.05 0.05"/>
  <mesh name="ball" vertex="{ball}"/>
  <mesh name="held" vertex="{ball}"/>
</asset><worldbody>
  <light pos="0 0 3"/>
  <geom name="floor" type="plane" size="2 2 0.1"/>
  <camera name="scene" pos="0 -1 0.3" xyaxes="1 0 0 0 0.3 1"/>
  <geom name="ball" type="mesh" mesh="ball" pos="0.15 0 0.1" contype="0" conaffinity="0" rgba="0.2 0.6 0.9 1"/>
  <body name="falling" pos="0 0 0.3"><freejoint/>
    <geom name="box" type="mesh" mesh="box"/>
    <geom name="box_vis" type="mesh" mesh="box" contype="0" conaffinity="0"/>
  </body>
  <body name="arm" pos="-0.15 0 0.1"><joint type="hinge" axis="0 0 1"/>
    <camera name="wrist" pos="0 0 0.2" xyaxes="1 0 0 0 1 0"/>
    <geom name="held" type="mesh" mesh="held" contype="0" conaffinity="0" rgba="0.9 0.6 0.2 1"/>
  </body>
</worldbody></mujoco>"""


def _sphere(n: int = 600, r: float = 0.08) -> str:
    k = np.arange(n) + 0.5  # a Fibonacci sphere: n points, MuJoCo builds their convex hull's triangles
    phi, theta = np.arccos(1 - 2 * k / n), np.pi * (1 + 5**0.5) * k
    pts = r * np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)
    return " ".join(f"{x:.6f}" for x in pts.ravel())


def _model():
    from p2pfl.robotics.gl import import_mujoco

    mujoco = import_mujoco()
    return mujoco, mujoco.MjModel.from_xml_string(_XML.format(ball=_sphere()))


def _mesh(mujoco, model, name: str) -> int:
    return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, name)


@needs_mujoco
def test_only_visual_meshes_away_from_the_rendered_cameras_are_simplified():
    mujoco, model = _model()
    ball, held, box = (_mesh(mujoco, model, n) for n in ("ball", "held", "box"))
    assert simplified_meshes(mujoco, model, ["scene", "wrist"]) == [ball]
    assert simplified_meshes(mujoco, model, ["scene"]) == sorted([ball, held])
    with pytest.raises(ConfigError, match="camera 'eye' is not in the model"):
        simplified_meshes(mujoco, model, ["eye"])
    faces = model.mesh_facenum.copy()
    box_faces = model.mesh_face[model.mesh_faceadr[box]:model.mesh_faceadr[box] + faces[box]].copy()
    before, after = simplify_visual_meshes(mujoco, model, 0.002, ["scene", "wrist"])
    assert before == faces[ball] > 1000 and 0 < after == model.mesh_facenum[ball] < before // 2
    assert model.mesh_facenum[held] == faces[held] and model.mesh_facenum[box] == faces[box]
    assert np.array_equal(model.mesh_face[model.mesh_faceadr[box]:model.mesh_faceadr[box] + faces[box]], box_faces)
    assert simplify_visual_meshes(mujoco, model, 0.0, ["scene"]) == (0, 0)


@needs_mujoco
def test_the_physics_is_byte_identical_and_the_render_close():
    from p2pfl.robotics.gl import renderer

    def run(error: float):
        mujoco, model = _model()
        simplify_visual_meshes(mujoco, model, error, ["wrist"])
        data = mujoco.MjData(model)
        qpos = []
        for _ in range(300):  # the box falls onto the floor and settles
            mujoco.mj_step(model, data)
            qpos.append(data.qpos.copy())
        r = renderer(mujoco, model, 64, 64)
        try:
            r.update_scene(data, "scene")
            return np.array(qpos), r.render().copy()
        finally:
            r.close()

    q0, img0 = run(0.0)
    q1, img1 = run(0.002)
    assert q0[-1][2] < 0.06  # it landed
    assert q0.tobytes() == q1.tobytes()
    diff = np.abs(img0.astype(np.int16) - img1.astype(np.int16))
    assert 0 < diff.mean() < 2.0  # a few edge pixels of the simplified ball


def test_demos_drawn_with_other_meshes_than_the_rollouts_are_refused():
    check_render_lod({"render_lod": 0.0005}, 0.0005, Path("a_demo.hdf5"))
    check_render_lod({}, 0.0, Path("a_demo.hdf5"))  # LIBERO's own files: whole meshes
    with pytest.raises(DataError, match=r"a_demo.hdf5: demos rendered with render_lod 0, the scenario draws "
                                        r"rollouts with data.partition.render_lod 0.0005; set render_lod: 0, or "
                                        r"record demos with python -m p2pfl.robotics.libero_demos --lod 0.0005"):
        check_render_lod({}, 0.0005, Path("a_demo.hdf5"))


def test_render_lod_is_for_libero_only():
    from pydantic import ValidationError

    from p2pfl.robotics.schema import RobotSuitesPartition

    assert RobotSuitesPartition(kind="robot_suites", source="libero", suites=["libero_object"],
                                render_lod=0.0005).render_lod == 0.0005
    with pytest.raises(ValidationError, match="render_lod needs source: libero"):
        RobotSuitesPartition(kind="robot_suites", render_lod=0.0005)
