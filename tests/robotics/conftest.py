"""Robotics tests that render with MuJoCo skip, with the reason, where no OpenGL backend is usable.

The check is cheap first (``gl_backend_error``: the backend's shared library, no import); only
when the library is there does it render one tiny scene (``mujoco_available``).
"""

import pytest

from p2pfl.robotics.gl import gl_backend_error

#: Skip reason's first words: what to install (the default backend is OSMesa).
GL_SKIP = "needs libosmesa6 (apt-get install libosmesa6) for MuJoCo rendering, or MUJOCO_GL=egl with EGL drivers"


def _render_skip_reason():
    reason = gl_backend_error()
    if reason is not None:
        return f"{GL_SKIP}; here: {reason}"
    from p2pfl.robotics.env import mujoco_available

    reason = mujoco_available()
    return None if reason is None else f"MuJoCo cannot render offscreen here: {reason}"


_REASON = _render_skip_reason()
#: For tests that render (environments, demo generation, robot federations, rollouts).
needs_mujoco = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
