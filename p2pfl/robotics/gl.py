"""MuJoCo's OpenGL backend: choose it, check it cheaply, and import ``mujoco`` safely.

MuJoCo picks its offscreen GL backend from ``MUJOCO_GL`` when ``mujoco`` is first imported. We
default to OSMesa (CPU rendering, any machine with Debian's ``libosmesa6``); set ``MUJOCO_GL=egl``
yourself on a machine with EGL drivers (a GPU). Without the backend's library, ``import mujoco``
dies deep in PyOpenGL (``AttributeError: 'NoneType' object has no attribute 'glGetError'``);
:func:`require_gl` turns that into a one-line :class:`~p2pfl.errors.UserError` before any heavy
work, and :func:`import_mujoco` is the only place the package imports ``mujoco``.

Nothing here runs at import time: ``import p2pfl.robotics`` imports neither mujoco nor triton.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
from types import ModuleType
from typing import Optional

from p2pfl.errors import UserError

__all__ = ["GL_HELP", "DEFAULT_BACKEND", "gl_backend", "gl_backend_error", "require_gl", "import_mujoco", "renderer"]

#: The first half of the error when rendering is impossible; "; here: <reason>" follows.
GL_HELP = ("MuJoCo rendering needs an OpenGL backend: apt-get install libosmesa6 (MUJOCO_GL=osmesa), "
           "or set MUJOCO_GL=egl with EGL drivers")
DEFAULT_BACKEND = "osmesa"
_DISABLED = ("disable", "disabled", "off", "false", "0")
_WINDOWED = ("glfw", "glx", "enable", "enabled", "on", "true", "1", "")


def gl_backend() -> str:
    """The backend MuJoCo will use: ``MUJOCO_GL`` as MuJoCo reads it, ``osmesa`` when unset."""
    return os.environ.get("MUJOCO_GL", DEFAULT_BACKEND).lower().strip()


def gl_backend_error() -> Optional[str]:
    """None when MuJoCo's offscreen rendering can load here; otherwise a one-line reason.

    Cheap and safe: looks for the backend's shared library (``ctypes.util.find_library``) and
    imports nothing (no GL context, no mujoco, no triton). A library that is present but whose
    driver cannot create a context still fails later, in :func:`import_mujoco` or the renderer.
    """
    if importlib.util.find_spec("mujoco") is None:
        return "the mujoco package is not installed (pip install -c constraints.txt -e .)"
    backend = gl_backend()
    if backend == "osmesa":
        if ctypes.util.find_library("OSMesa") is None:
            return "libOSMesa not found (MUJOCO_GL=osmesa)"
        return None
    if backend == "egl":
        if ctypes.util.find_library("EGL") is None:
            return "libEGL not found (MUJOCO_GL=egl)"
        return None
    if backend in _DISABLED:
        return f"MUJOCO_GL={backend} turns MuJoCo rendering off"
    if backend in _WINDOWED:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            return f"MUJOCO_GL={backend or '(empty)'} renders through a window (GLFW) but no display is set"
        if importlib.util.find_spec("glfw") is None:
            return f"MUJOCO_GL={backend or '(empty)'} needs the glfw package"
        return None
    return f"MUJOCO_GL={backend} is not a MuJoCo GL backend (osmesa, egl, glfw)"


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def _load_triton_first() -> None:
    """Load triton's native library now, before any OSMesa GL context exists.

    torch imports triton lazily (first optimizer step, torch._dynamo); loading its native
    library after MuJoCo has created an OSMesa context segfaults the process (seen with
    torch 2.14.1, mujoco 3.17 and Mesa 22.3). Importing it first avoids that.
    """
    if importlib.util.find_spec("triton") is not None:
        import triton.runtime.autotuner  # noqa: F401


def require_gl() -> None:
    """Make the process ready for MuJoCo rendering, or raise a one-line ``UserError``.

    Sets the default backend (``MUJOCO_GL=osmesa``, and ``PYOPENGL_PLATFORM`` to match) unless
    the user chose one, checks it with :func:`gl_backend_error`, and loads triton before any GL
    context can exist. Call it before heavy work (the robot federation does, first thing), and
    before anything else that renders with MuJoCo (LIBERO's robosuite).
    """
    os.environ.setdefault("MUJOCO_GL", DEFAULT_BACKEND)
    if gl_backend() == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    reason = gl_backend_error()
    if reason is not None:
        raise UserError(f"{GL_HELP}; here: {reason}")
    _load_triton_first()


def import_mujoco() -> ModuleType:
    """``mujoco``, imported for offscreen rendering after :func:`require_gl`.

    A failing import (the library is there but unusable) is a one-line ``UserError`` too.
    """
    require_gl()
    try:
        import mujoco
    except Exception as err:  # PyOpenGL raises AttributeError, OSError or ImportError by platform
        raise UserError(f"{GL_HELP}; here: import mujoco failed with MUJOCO_GL={gl_backend()}: {_one_line(err)}") from err
    return mujoco


def renderer(mujoco: ModuleType, model, height: int, width: int):
    """``mujoco.Renderer(model, height, width)``; a GL context that cannot be made is a ``UserError``."""
    try:
        return mujoco.Renderer(model, height, width)
    except Exception as err:  # mujoco.FatalError, EGL/OSMesa context errors
        raise UserError(f"{GL_HELP}; here: no GL context with MUJOCO_GL={gl_backend()}: {_one_line(err)}") from err
