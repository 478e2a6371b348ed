"""MuJoCo's GL backend: a cheap check, a one-line error instead of PyOpenGL's traceback, and
nothing (mujoco, triton) imported until rendering is needed."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.errors import UserError
from p2pfl.robotics import gl
from p2pfl.robotics.gl import GL_HELP, gl_backend_error, require_gl

from .conftest import needs_mujoco

pytestmark = pytest.mark.robotics

ROOT = Path(__file__).resolve().parents[2]


def _robot_scenario(tmp_path) -> dict:
    return {
        "name": "robot-gl", "seed": 0,
        "topology": {"kind": "complete", "n": 2, "servers": [{"name": "server", "attach": "all"}]},
        "data": {"dataset": "robotics", "root": str(tmp_path / "demos"),
                 "partition": {"kind": "robot_suites", "suites": ["object"], "clients_per_suite": 2,
                               "reference_clients": 2, "demos_per_task": 2, "eval_episodes": 1, "horizon": 2}},
        "protocol": {"name": "fedavg", "rounds": 1},
    }


def _cli(tmp_path, env_changes: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(_robot_scenario(tmp_path)))
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-m", "p2pfl", "run", str(path), "--out", str(tmp_path / "run"), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


# --- the cheap check ---------------------------------------------------------------------------
def test_backend_check_names_the_missing_library_and_imports_nothing(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    assert gl_backend_error() == "libOSMesa not found (MUJOCO_GL=osmesa)"  # the default backend
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert gl_backend_error() == "libEGL not found (MUJOCO_GL=egl)"
    monkeypatch.setenv("MUJOCO_GL", "bogus")
    assert "not a MuJoCo GL backend" in gl_backend_error()
    monkeypatch.setenv("MUJOCO_GL", "off")
    assert "off" in gl_backend_error()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: f"lib{name}.so.1")
    monkeypatch.setenv("MUJOCO_GL", "OSMesa")  # MuJoCo lower-cases the value too
    assert gl_backend_error() is None


def test_require_gl_raises_one_line_user_error(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "bogus")
    with pytest.raises(UserError) as err:
        require_gl()
    msg = str(err.value)
    assert msg.startswith(GL_HELP) and "\n" not in msg and "MUJOCO_GL=bogus" in msg
    assert GL_HELP == ("MuJoCo rendering needs an OpenGL backend: apt-get install libosmesa6 (MUJOCO_GL=osmesa), "
                       "or set MUJOCO_GL=egl with EGL drivers")


def test_robot_federation_checks_gl_before_any_demo(tmp_path, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "bogus")  # unusable on every machine, OSMesa installed or not
    with pytest.raises(UserError, match="MuJoCo rendering needs an OpenGL backend"):
        p2pfl.run(_robot_scenario(tmp_path), write=False)
    assert not (tmp_path / "demos").exists()  # failed before generating (or even looking for) demos


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_robot_run_with_an_unusable_backend_is_one_line_exit_2(tmp_path):
    r = _cli(tmp_path, {"MUJOCO_GL": "bogus"}, "--set", "protocol.rounds=1")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"p2pfl: error: {GL_HELP}")


@pytest.mark.skipif(ctypes.util.find_library("OSMesa") is not None, reason="libOSMesa is installed here")
def test_cli_robot_run_without_osmesa_names_the_package(tmp_path):
    r = _cli(tmp_path, {}, "--set", "protocol.rounds=1")  # MUJOCO_GL unset: the default, osmesa
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr and "glGetError" not in r.stderr
    assert r.stderr.strip() == f"p2pfl: error: {GL_HELP}; here: libOSMesa not found (MUJOCO_GL=osmesa)"


# --- nothing heavy at import time --------------------------------------------------------------
@pytest.mark.slow
def test_importing_robotics_and_data_loads_neither_mujoco_nor_triton():
    # one fresh interpreter: p2pfl.data first (it must import nothing from p2pfl.robotics), then robotics on top
    code = ("import os, sys\n"
            "import p2pfl.data, p2pfl.data.partitions, p2pfl.data.splitters\n"
            "print(sorted(m for m in sys.modules if m.startswith('p2pfl.robotics')))\n"
            "import p2pfl.robotics, p2pfl.robotics.federation, p2pfl.robotics.env, p2pfl.sim.world\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'mujoco', 'triton', 'OpenGL'})\n"
            "print(heavy, os.environ.get('MUJOCO_GL'), any(m.startswith('p2pfl.robotics') for m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    data, robotics = out.stdout.strip().splitlines()
    assert data == "[]"  # p2pfl.data imports nothing from p2pfl.robotics
    assert robotics.split() == ["[]", "None", "True"]


@needs_mujoco
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_is_loaded_before_mujoco_creates_a_gl_context():
    code = ("import sys\n"
            "from p2pfl.robotics.gl import import_mujoco\n"
            "import builtins\n"
            "order = []\n"
            "real = builtins.__import__\n"
            "def spy(name, *a, **k):\n"
            "    top = name.split('.')[0]\n"
            "    if top in ('mujoco', 'triton') and top not in order and top not in sys.modules:\n"
            "        order.append(top)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = spy\n"
            "import_mujoco()\n"
            "print(order)\n")
    env = {k: v for k, v in os.environ.items()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['triton', 'mujoco']"


def test_gl_module_does_nothing_at_import():
    assert gl.DEFAULT_BACKEND == "osmesa" and callable(gl.import_mujoco)
