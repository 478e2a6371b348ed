"""Progress of ``p2pfl run``: setup steps and rounds as plain lines when stdout is not a terminal."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import yaml

import p2pfl
from p2pfl.cli import main
from p2pfl.progress import RunProgress
from tests.helpers import digits_scenario


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(digits_scenario({"name": "gossip", "rounds": 3}, n=4)), encoding="utf-8")
    return path


@pytest.mark.e2e
@pytest.mark.slow
def test_a_piped_run_prints_plain_setup_and_round_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` in-process: its stdout (captured) is not a terminal, as when piped."""
    argv = ["run", str(_scenario(tmp_path)), "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    setup = [line for line in lines if line.startswith("setup: ")]
    assert setup == ["setup: building the ring topology (4 devices)...",
                     "setup: loading digits and partitioning it (iid)...",
                     "setup: drawing device profiles and building the network...",
                     "setup: setting up protocol gossip..."]
    assert "simulating 3 rounds..." in lines
    last = [line for line in lines if line.startswith("round ")][-1]
    assert last.startswith("round 3/3 (100%) elapsed ") and last.endswith(" s")
    assert lines.index(setup[-1]) < lines.index(last)
    assert "\x1b[" not in out  # no terminal control codes in a log
    assert main([*argv[:-1], str(tmp_path / "run2"), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")


def test_the_python_api_reports_each_build_step(tmp_path: Path) -> None:
    steps: list[str] = []
    totals: list[int] = []
    p2pfl.run(_scenario(tmp_path), write=False, on_setup=steps.append, on_start=totals.append)
    assert [s.split()[0] for s in steps] == ["building", "loading", "drawing", "setting"]
    assert totals == [3 * 4]


def test_plain_lines_are_rate_limited_with_a_heartbeat_while_nothing_advances() -> None:
    out = io.StringIO()
    with RunProgress(rounds=10, interval=0.2, stream=out) as progress:
        progress.setup("loading data")
        progress.start(20)
        for _ in range(6):  # fast rounds: no line each
            progress.advance()
        deadline = time.monotonic() + 60  # a long round: wait until the heartbeat speaks (60 s: a guard only)
        while "round 3/10 (30%)" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.01)
        for _ in range(14):
            progress.advance()
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["setup: loading data...", "simulating 10 rounds..."]
    rounds = [line for line in lines if line.startswith("round ")]
    assert any(line.startswith("round 3/10 (30%) elapsed ") for line in rounds)  # heartbeat during the stall
    assert rounds[-1].startswith("round 10/10 (100%)")
    assert len(rounds) <= 8  # not one line per node round


def test_disabled_progress_prints_nothing() -> None:
    out = io.StringIO()
    with RunProgress(enabled=False, rounds=2, stream=out) as progress:
        progress.setup("x")
        progress.start(2)
        progress.advance()
        progress.advance()
    assert out.getvalue() == ""


def test_the_terminal_bar_goes_from_setup_to_rounds_without_error() -> None:
    out = io.StringIO()
    with RunProgress(rounds=2, plain=False, stream=out) as progress:
        progress.setup("building the ring topology")
        progress.setup("loading digits")
        progress.start(4)
        for _ in range(4):
            progress.advance()
    assert "setup: " not in out.getvalue() and "round " not in out.getvalue()  # rich's transient bar, no plain lines
