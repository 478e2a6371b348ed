"""In-process helpers of ``p2pfl.metrics.measured`` and ``revision_includes`` of ``p2pfl.metrics.runs``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from p2pfl.metrics.measured import best_of, measure, outcome_of, rss_bytes, top_shares
from p2pfl.metrics.runs import revision_includes


def test_best_of_warms_up_once_then_times_repeat_runs_of_calls():
    calls = []
    seconds = best_of(lambda: calls.append(1), repeat=3, calls=4)
    assert len(calls) == 1 + 3 * 4 and seconds >= 0.0


def test_rss_bytes_grows_with_a_touched_buffer():
    before = rss_bytes()
    buf = bytearray(64 * 2**20)
    buf[::4096] = b"\x01" * len(buf[::4096])
    assert rss_bytes() - before >= 60 * 2**20


def test_top_shares_reads_folded_stacks(tmp_path: Path):
    folded = tmp_path / "run.folded"
    folded.write_text("process 1;main (p2pfl/cli.py:1);train (p2pfl/learning/train.py:9) 6\n"
                      "process 1;main (p2pfl/cli.py:1);send (p2pfl/sim/network.py:3) 3\n"
                      "process 1;main (p2pfl/cli.py:1);sleep (time.py:1) 1\n"
                      "a line without a count\n")
    shares = top_shares(folded)
    assert shares["self"] == [("train", 60.0), ("send", 30.0), ("sleep", 10.0)]
    assert shares["p2pfl"] == [("send", 30.0)]  # main (100%) and train (60%) are outer loops, not shown


def test_revision_includes_asks_git(tmp_path: Path):
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    for i in (1, 2):
        (tmp_path / "f").write_text(str(i))
        git("add", "f")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", str(i))
    first, second = git("rev-parse", "HEAD~1"), git("rev-parse", "HEAD")
    assert revision_includes(second, first, tmp_path) is True
    assert revision_includes(first, second, tmp_path) is False
    assert revision_includes("0" * 40, first, tmp_path) is None  # not in this history
    assert revision_includes(None, first, tmp_path) is None and revision_includes(float("nan"), first) is None


def test_outcome_of_a_child_that_emits_its_figures():
    def run(code: str):
        return outcome_of(measure([sys.executable, "-c", code], timeout_s=60))

    ok = run("from p2pfl.metrics.measured import emit; emit({'run_s': 1.5})")
    assert ok.ok and ok.status == "ok" and ok.data == {"run_s": 1.5}
    na = run("from p2pfl.metrics.measured import emit; emit({'na': 'not built'})")
    assert na.status == "n/a (not built)" and na.data == {} and not na.ok
    assert run("print('nothing tagged')").status == "failed: no result"
    assert run("raise SystemExit('boom')").status == "failed: boom"
    slow = outcome_of(measure([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5))
    assert slow.status == "timeout" and slow.data == {}
