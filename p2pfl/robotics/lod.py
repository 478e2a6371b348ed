"""Simplified visual meshes for offscreen MuJoCo renders: the same scene drawn from fewer triangles.

Headless MuJoCo draws through OSMesa's llvmpipe, at a cost per triangle (:mod:`p2pfl.robotics.cull`):
a LIBERO-Object scene's visual meshes hold about 308,000 triangles, most smaller than a pixel at
LIBERO's 128 px cameras. :func:`simplify_visual_meshes` replaces each visual mesh's triangles, in the
compiled model, by a simplification whose surface stays within ``error`` metres of the original
(meshoptimizer's quadric edge collapse, absolute error; Garland and Heckbert, SIGGRAPH 1997). Only
triangles change: every simplified corner is an original corner (its vertex, normal and texture
coordinate), texture seams stay where they are, and the physics never reads these meshes:

* a mesh is simplified only when every geom using it is visual (``contype`` and ``conaffinity`` 0),
  so contacts, inertia and the collision meshes are untouched (a rollout's states are byte for byte
  the ones without it, tested);
* a mesh on a body that moves with a rendered camera (the camera's body or a body below it: the
  gripper under LIBERO's eye-in-hand camera) is kept whole, since it always sits centimetres from that
  camera, where a millimetre is several pixels;
* ray casts (``mj_ray``) on visual geoms would see the simplified triangles; robosuite casts none.

Vertices are welded by position and texture coordinate (LIBERO's meshes store three vertices per
triangle), not by normal: flat-shaded meshes would otherwise have no shared edge to collapse. A
simplified corner keeps its original normal. What it costs in pixels and buys in time is measured by
``analysis/bench/bench_libero_lod.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from p2pfl.errors import ConfigError

__all__ = ["simplify_mesh", "simplified_meshes", "simplify_visual_meshes", "simplify_robosuite_renders"]

#: Simplified corner indices by mesh content and error: robosuite compiles a new model at every hard
#: reset (each episode), with the same meshes.
_CACHE: dict[tuple[bytes, float], np.ndarray] = {}


def _meshoptimizer() -> Any:
    try:
        import meshoptimizer
    except ImportError:
        raise ConfigError("data.partition.render_lod > 0 needs meshoptimizer: pip install -e '.[libero]' "
                          "(or set render_lod: 0 to draw LIBERO's meshes whole)") from None
    return meshoptimizer


def simplify_mesh(vert: np.ndarray, face: np.ndarray, texcoord: np.ndarray | None, facetexcoord: np.ndarray | None,
                  error: float) -> np.ndarray:
    """A simplification of one triangle mesh within ``error`` (same units as ``vert``), as original corners.

    ``face`` (F, 3) indexes ``vert``; ``facetexcoord`` (F, 3), where given, indexes ``texcoord``. Returns
    (K, 3) indices into the F * 3 corners (corner ``3 f + c`` is corner c of face f): simplified face k
    is drawn with the vertex, normal and texture coordinate of corners ``out[k]``, in order (so keeps its
    winding). ``error`` 0 collapses only what changes no position (coplanar, collinear triangles).
    """
    mo = _meshoptimizer()
    corners = face.reshape(-1)
    weld = [np.asarray(vert, np.float64)[corners]]
    if texcoord is not None and facetexcoord is not None and len(texcoord):
        weld.append(np.asarray(texcoord, np.float64)[facetexcoord.reshape(-1)])
    key = np.ascontiguousarray(np.concatenate(weld, axis=1))
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    indices = inv.reshape(-1).astype(np.uint32)
    positions = np.ascontiguousarray(key[first, :3], np.float32)
    dest = np.zeros(len(indices), np.uint32)
    n = mo.simplify(dest, indices, positions, target_index_count=0, target_error=float(error),
                    options=mo.SIMPLIFY_ERROR_ABSOLUTE)
    return np.asarray(first[dest[:n]], np.int64).reshape(-1, 3)


def _moves_with_a_camera(mujoco: Any, model: Any, cameras: Sequence[str]) -> set[int]:
    """Bodies that are the body of one of ``cameras`` (names) or below it in the tree."""
    camera_bodies = set()
    for name in cameras:
        c = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        if c < 0:
            raise ConfigError(f"camera {name!r} is not in the model")
        if int(model.cam_bodyid[c]) > 0:
            camera_bodies.add(int(model.cam_bodyid[c]))
    out = set()
    for b in range(model.nbody):
        a = b
        while a > 0 and a not in camera_bodies:
            a = int(model.body_parentid[a])
        if a > 0:
            out.add(b)
    return out


def simplified_meshes(mujoco: Any, model: Any, cameras: Sequence[str] = ()) -> list[int]:
    """The meshes :func:`simplify_visual_meshes` may simplify: drawn by visual geoms only, none of them on a
    body that moves with one of ``cameras`` (the names of the cameras rendered)."""
    mesh = mujoco.mjtGeom.mjGEOM_MESH
    near = _moves_with_a_camera(mujoco, model, cameras)
    ok: dict[int, bool] = {}
    for g in range(model.ngeom):
        if model.geom_type[g] != mesh:
            continue
        m = int(model.geom_dataid[g])
        visual = model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0
        ok[m] = ok.get(m, True) and bool(visual) and int(model.geom_bodyid[g]) not in near
    return sorted(m for m, good in ok.items() if good)


def simplify_visual_meshes(mujoco: Any, model: Any, error: float, cameras: Sequence[str] = ()) -> tuple[int, int]:
    """Simplify, in place, the triangles of ``model``'s visual meshes (:func:`simplified_meshes`, ``cameras``
    the names of the cameras rendered) within ``error`` metres; (triangles before, after) over those meshes.
    Upload the meshes again to any render context made before (``mujoco.mjr_uploadMesh``)."""
    if error <= 0:
        return 0, 0
    return _simplify(model, simplified_meshes(mujoco, model, cameras), error)


def _simplify(model: Any, meshes: Sequence[int], error: float) -> tuple[int, int]:
    """Simplify ``meshes`` of ``model`` in place within ``error``; (triangles before, after)."""
    before = after = 0
    for i in meshes:
        fa, fn = int(model.mesh_faceadr[i]), int(model.mesh_facenum[i])
        va, vn = int(model.mesh_vertadr[i]), int(model.mesh_vertnum[i])
        ta, tn = int(model.mesh_texcoordadr[i]), int(model.mesh_texcoordnum[i])
        face = model.mesh_face[fa:fa + fn].copy()
        normal = model.mesh_facenormal[fa:fa + fn].copy()
        vert = model.mesh_vert[va:va + vn]
        tex = model.mesh_texcoord[ta:ta + tn] if tn else None
        ftex = model.mesh_facetexcoord[fa:fa + fn].copy() if tn else None
        digest = hashlib.blake2b(digest_size=16)
        for a in (vert, face, normal, tex, ftex):
            digest.update(b"-" if a is None else np.ascontiguousarray(a).tobytes())
        key = (digest.digest(), float(error))
        if key not in _CACHE:
            _CACHE[key] = simplify_mesh(vert, face, tex, ftex, error)
        out = _CACHE[key]
        k = len(out)
        model.mesh_face[fa:fa + k] = face.reshape(-1)[out]
        model.mesh_facenormal[fa:fa + k] = normal.reshape(-1)[out]
        if ftex is not None:
            model.mesh_facetexcoord[fa:fa + k] = ftex.reshape(-1)[out]
        model.mesh_facenum[i] = k
        before += fn
        after += k
    return before, after


def simplify_robosuite_renders(sim: Any, error: float, cameras: Sequence[str]) -> tuple[int, int]:
    """Simplify the visual meshes of robosuite's ``sim`` (an ``MjSim``; ``cameras``: the names of the
    cameras it renders) and upload them to its offscreen render context; call after every reset (robosuite's
    hard reset compiles a new model); (before, after), (0, 0) where this model is simplified already."""
    model = sim.model._model
    if error <= 0 or getattr(sim, "_p2pfl_simplified", None) is model:
        return 0, 0
    import mujoco

    sim._p2pfl_simplified = model
    meshes = simplified_meshes(mujoco, model, cameras)
    counts = _simplify(model, meshes, error)
    ctx = getattr(sim, "_render_context_offscreen", None)
    if ctx is not None:
        for i in meshes:
            mujoco.mjr_uploadMesh(model, ctx.con, i)
    return counts
