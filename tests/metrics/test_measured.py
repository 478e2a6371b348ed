"""A command measured in a fresh process: its figures, its failures, its process tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.metrics.measured import (
    Measured,
    commit_of,
    emit,
    machine_line,
    measure,
    result_of,
    run_command,
    run_env,
    tree_pids,
)

PY = sys.executable


def test_a_child_own_peak_and_its_result_line() -> None:
    code = ("import sys; from p2pfl.metrics.measured import emit; b = bytearray(150 * 2**20); "
            "emit({'touched': sum(b[::4096]), 'n': 3}); print('oops', file=sys.stderr)")
    m = measure([PY, "-c", code], timeout_s=120)
    assert m.failure is None and m.returncode == 0 and not m.timed_out
    assert m.peak_rss_mib >= 150  # wait4's exact peak of the child itself
    assert result_of(m) == {"touched": 0, "n": 3}
    assert m.stderr == "oops\n"


def test_failures_say_why_in_one_line() -> None:
    m = measure([PY, "-c", "import sys; print('first', file=sys.stderr); sys.exit('the real reason')"], timeout_s=120)
    assert (m.returncode, m.failure, result_of(m)) == (1, "the real reason", None)
    killed = measure([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout_s=120)
    assert killed.failure == "killed by signal 9 (out of memory?)"


@pytest.mark.slow
def test_a_run_past_its_timeout_is_killed_with_its_children() -> None:
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "time.sleep(600)")
    m = measure([PY, "-c", code], timeout_s=1.0)
    assert m.timed_out and m.failure is not None and m.failure.startswith("stopped after")
    assert m.returncode == -9


def test_tree_pids_finds_children_and_grandchildren() -> None:
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import sys; sys.stdin.read()'])"
    child = subprocess.Popen([PY, "-c", code], stdin=subprocess.PIPE)
    try:
        pids: set[int] = set()
        while len(pids) < 2:  # until the grandchild has started (it then waits on the shared stdin)
            pids = tree_pids(child.pid)
        assert child.pid in pids and len(pids) == 2
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_emit_prints_one_tagged_line(capsys: pytest.CaptureFixture[str]) -> None:
    emit({"a": 1})
    out = capsys.readouterr().out
    assert result_of(Measured(0, False, 0.0, 0.0, 0.0, "noise\n" + out, "")) == {"a": 1}


def test_machine_line_names_the_commit() -> None:
    line = machine_line(Path(__file__).resolve().parents[2], "QUICK")
    assert line.startswith("commit ") and "torch " in line and line.endswith("; QUICK")


def test_run_command_and_its_environment(monkeypatch, tmp_path) -> None:
    assert run_command("s.yaml", ["a=1", "b=2"], tmp_path / "out") == [
        PY, "-m", "p2pfl", "run", "s.yaml", "--quiet", "--out", str(tmp_path / "out"), "--set", "a=1", "--set", "b=2"]
    assert run_command(Path("s.yaml"), [], "o", entry=("-c", "code"))[1:4] == ["-c", "code", "run"]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setenv("P2PFL_TEST_KEEP", "1")
    env = run_env({"PYTHONPATH": "/x"})
    assert "MALLOC_ARENA_MAX" not in env and env["P2PFL_TEST_KEEP"] == "1" and env["PYTHONPATH"] == "/x"


def test_commit_of_a_folder_outside_git_is_empty(tmp_path) -> None:
    assert commit_of(tmp_path) == ""
    assert machine_line(tmp_path).startswith("commit unknown; CPUs ")
