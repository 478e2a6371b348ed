"""Frustum culling before a MuJoCo render: the same bytes, and only geoms out of view hidden."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfl.robotics.cull import cull_scene

from .conftest import needs_mujoco

pytestmark = [pytest.mark.robotics, needs_mujoco]

# A camera at the origin looking down -z (fovy 60: tan 30 deg = 0.577 each side at a square viewport);
# cubes of half-size 0.1 (geom_rbound 0.173), two metres away unless said otherwise.
CUBES = {
    "centre": "0 0 -2",
    "behind": "0 0 2",
    "far_left": "-5 0 -2",
    "straddles_right": "1.205 0 -2",  # 5 cm of it inside the right edge (x = 1.155 at z = -2)
    "wide_only": "1.5 0 -2",  # outside at a square viewport; inside at 3:2 (edge x = 1.732)
}
#: A 2 cm cube 30 cm away, centred on the right edge: half of it in view (two pixels wide). Its sphere (r = 1.7 cm) is in view of the
#: frustum MuJoCo draws (the two eyes' average) and out of view of either eye alone (half the
#: interpupillary distance, 3.4 cm, off the centre), so culling with one eye's frustum would lose it.
SMALL_ON_EDGE = "0.1732 0 -0.3"


def _scene_xml(shadow: bool = False, reflective_floor: bool = False) -> str:
    cubes = "".join(f'<geom name="{name}" type="mesh" mesh="cube" pos="{pos}" rgba="0.8 0.2 0.2 1"/>'
                    for name, pos in CUBES.items())
    cubes += f'<geom name="small_on_edge" type="mesh" mesh="small" pos="{SMALL_ON_EDGE}" rgba="0.2 0.2 0.8 1"/>'

    floor = ('<geom name="floor" type="plane" size="5 5 0.1" pos="0 -1 0" zaxis="0 1 0" material="mirror"/>'
             if reflective_floor else "")
    return f"""<mujoco><asset>
  <mesh name="cube" vertex="-1 -1 -1 1 -1 -1 -1 1 -1 1 1 -1 -1 -1 1 1 -1 1 -1 1 1 1 1 1" scale="0.1 0.1 0.1"/>
  <mesh name="small" vertex="-1 -1 -1 1 -1 -1 -1 1 -1 1 1 -1 -1 -1 1 1 -1 1 -1 1 1 1 1 1" scale="0.01 0.01 0.01"/>
  <material name="mirror" reflectance="0.5"/></asset>
<worldbody>
  <light pos="0 2 0" dir="0 -1 0" castshadow="{'true' if shadow else 'false'}"/>
  <camera name="cam" pos="0 0 0" xyaxes="1 0 0 0 1 0" fovy="60"/>
  {floor}{cubes}
</worldbody></mujoco>"""


def _render(xml: str, width: int, height: int, *, cull: bool, hide: str | None = None):
    from p2pfl.robotics.gl import import_mujoco, renderer

    mujoco = import_mujoco()
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    r = renderer(mujoco, model, height, width)
    try:
        r.update_scene(data, "cam")
        scn = r.scene
        hidden = cull_scene(mujoco, scn, width, height) if cull else 0
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g.objid) for g in scn.geoms[:scn.ngeom]
                 if g.type == mujoco.mjtGeom.mjGEOM_NONE]
        if hide is not None:
            scn.geoms[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, hide)].type = mujoco.mjtGeom.mjGEOM_NONE
        return r.render().copy(), hidden, names
    finally:
        r.close()


def test_a_culled_render_is_byte_identical_and_hides_only_geoms_out_of_view():
    xml = _scene_xml()
    full, _, _ = _render(xml, 64, 64, cull=False)
    culled, hidden, names = _render(xml, 64, 64, cull=True)
    assert hidden == 3 and sorted(names) == ["behind", "far_left", "wide_only"]
    assert np.array_equal(full, culled)
    # the cubes at the edge are kept, and they are in the picture: hiding either changes pixels
    for edge in ("straddles_right", "small_on_edge"):
        without_edge, _, _ = _render(xml, 64, 64, cull=False, hide=edge)
        assert not np.array_equal(full, without_edge), edge


def test_the_frustum_widens_with_the_viewports_aspect():
    xml = _scene_xml()
    full, _, _ = _render(xml, 96, 64, cull=False)
    culled, hidden, names = _render(xml, 96, 64, cull=True)
    assert hidden == 2 and sorted(names) == ["behind", "far_left"]
    assert np.array_equal(full, culled)
    without_wide, _, _ = _render(xml, 96, 64, cull=False, hide="wide_only")
    assert not np.array_equal(full, without_wide)


@pytest.mark.parametrize("kind", ["shadow", "reflection"])
def test_nothing_is_culled_when_a_geom_out_of_view_can_show_through_a_shadow_or_a_reflection(kind):
    xml = _scene_xml(shadow=kind == "shadow", reflective_floor=kind == "reflection")
    full, _, _ = _render(xml, 64, 64, cull=False)
    culled, hidden, names = _render(xml, 64, 64, cull=True)
    assert hidden == 0 and names == []
    assert np.array_equal(full, culled)
