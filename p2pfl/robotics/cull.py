"""Frustum culling of mesh geoms before an offscreen MuJoCo render: the same pixels, fewer triangles.

Headless MuJoCo renders through OSMesa's llvmpipe, which transforms every triangle it is given on
the CPU, in or out of view; a LIBERO-Object scene holds about 310,000 mesh triangles, so a frame
costs per triangle, not per pixel. The eye-in-hand camera sees a few per cent to about half of them,
the agent view 70-100%. Measured (2026-12-05, quiet machine, LIBERO-Object, both 128 px cameras, the
scripted expert's whole episodes): 92-96 ms a control step drawn as robosuite draws it, 84-85 ms culled,
frames identical; the agent view alone gains 3%. :func:`cull_scene` drops, after ``mjv_updateScene`` and before
``mjr_render``, every mesh geom whose bounding sphere (the model's ``geom_rbound`` about the geom's
frame) lies wholly outside the camera's view frustum: such a geom cannot reach a pixel, so the image
is byte for byte the one MuJoCo draws with it (tested on a hand-built scene and on LIBERO's).

The frustum is the one ``mjr_render`` draws a mono scene with: the average of the scene's two eye
cameras (``mjv_averageCamera``), ``glFrustum(center -+ halfwidth, bottom, top, near, far)`` with
``halfwidth = frustum_width``, or ``0.5 * aspect * (top - bottom)`` from the viewport when that is 0.
A geom outside the view can still show through a shadow or a reflection, and MuJoCo's stereo and
model-transform modes draw other frusta: in those cases nothing is culled.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["cull_scene", "cull_robosuite_renders"]


def _cull_unsafe(mujoco: Any, scn: Any) -> bool:
    """Whether something outside the frustum can reach a pixel, or the frustum is not the mono one."""
    if scn.stereo != mujoco.mjtStereo.mjSTEREO_NONE or scn.enabletransform:
        return True
    flags = scn.flags
    if flags[mujoco.mjtRndFlag.mjRND_SHADOW] and any(scn.lights[i].castshadow for i in range(scn.nlight)):
        return True
    if flags[mujoco.mjtRndFlag.mjRND_REFLECTION]:
        plane = mujoco.mjtGeom.mjGEOM_PLANE
        return any(g.type == plane and g.reflectance > 0 for g in scn.geoms[:scn.ngeom])
    return False


def _planes(cam: Any, aspect: float) -> list[tuple[float, float, float]]:
    """The frustum's side planes as (a, b, c): a*x + b*y + c*z >= 0 inside, (a, b, c) unit length, in the
    camera's (right, up, forward) frame."""
    n = cam.frustum_near
    half = cam.frustum_width or 0.5 * aspect * (cam.frustum_top - cam.frustum_bottom)
    left, right = (cam.frustum_center - half) / n, (cam.frustum_center + half) / n
    bottom, top = cam.frustum_bottom / n, cam.frustum_top / n
    planes = []
    for a, b, c in [(1.0, 0.0, -left), (-1.0, 0.0, right), (0.0, 1.0, -bottom), (0.0, -1.0, top)]:
        norm = math.hypot(a, b, c)
        planes.append((a / norm, b / norm, c / norm))
    return planes


def cull_scene(mujoco: Any, scn: Any, width: int, height: int) -> int:
    """Hide the mesh geoms of ``scn`` that cannot appear in a ``width`` x ``height`` render; how many.

    Call it between ``mjv_updateScene`` and ``mjr_render``; a hidden geom's type becomes
    ``mjGEOM_NONE``, which ``mjr_render`` skips (the next ``mjv_updateScene`` rebuilds the scene).
    """
    if _cull_unsafe(mujoco, scn):
        return 0
    cam = mujoco.mjv_averageCamera(scn.camera[0], scn.camera[1])
    if cam.orthographic:
        return 0
    pos, fwd, up = cam.pos, cam.forward, cam.up
    right = (fwd[1] * up[2] - fwd[2] * up[1], fwd[2] * up[0] - fwd[0] * up[2], fwd[0] * up[1] - fwd[1] * up[0])
    planes = _planes(cam, width / height)
    near, far = cam.frustum_near, cam.frustum_far
    mesh, none = mujoco.mjtGeom.mjGEOM_MESH, mujoco.mjtGeom.mjGEOM_NONE
    hidden = 0
    for g in scn.geoms[:scn.ngeom]:
        if g.type != mesh:
            continue
        r = g.modelrbound
        d = (g.pos[0] - pos[0], g.pos[1] - pos[1], g.pos[2] - pos[2])
        z = d[0] * fwd[0] + d[1] * fwd[1] + d[2] * fwd[2]
        x = d[0] * right[0] + d[1] * right[1] + d[2] * right[2]
        y = d[0] * up[0] + d[1] * up[1] + d[2] * up[2]
        if z < near - r or z > far + r or any(a * x + b * y + c * z < -r for a, b, c in planes):
            g.type = none
            hidden += 1
    return hidden


def cull_robosuite_renders(ctx: Any) -> None:
    """Make robosuite's offscreen render context ``ctx`` (an ``MjRenderContext``) cull before it draws.

    Its ``render(width, height, camera_id, segmentation)`` keeps robosuite's meaning: it points the
    context's camera at ``camera_id`` (-1: the free camera; None: as it is), updates the scene and draws it
    into the offscreen buffer, which ``read_pixels`` then reads. Segmentation renders, and renders larger
    than the buffer (robosuite grows it), go to robosuite's own method. Idempotent.
    """
    if getattr(ctx, "_p2pfl_culls", False):
        return
    import mujoco

    robosuite_render = ctx.render

    def render(width: int, height: int, camera_id: int | None = None, segmentation: bool = False) -> None:
        if segmentation or width > ctx.con.offWidth or height > ctx.con.offHeight:
            robosuite_render(width, height, camera_id=camera_id, segmentation=segmentation)
            return
        if camera_id is not None:
            free = camera_id == -1
            ctx.cam.type = mujoco.mjtCamera.mjCAMERA_FREE if free else mujoco.mjtCamera.mjCAMERA_FIXED
            ctx.cam.fixedcamid = camera_id
        mujoco.mjv_updateScene(ctx.model._model, ctx.data._data, ctx.vopt, ctx.pert, ctx.cam,
                               mujoco.mjtCatBit.mjCAT_ALL, ctx.scn)
        cull_scene(mujoco, ctx.scn, width, height)
        mujoco.mjr_render(mujoco.MjrRect(0, 0, width, height), ctx.scn, ctx.con)

    ctx.render = render
    ctx._p2pfl_culls = True
