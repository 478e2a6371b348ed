"""Measuring a command in a fresh process, as the benchmarks in ``analysis/`` do.

    measure(cmd, timeout_s=..)   run it in its own session: wall seconds, the peak PSS of its whole
                                 process tree, its own peak RSS, its output; killed (with everything
                                 it started) past the timeout
    emit(result) / result_of(m)  a child's figures as one tagged JSON line on stdout, and back
    outcome_of(m)                a child's run as a table row needs it: ok, timeout, n/a or failed, and its figures
    run_command(scenario, ...)   ``p2pfl run`` in a fresh interpreter; run_env(): its environment, glibc's
                                 allocator at its defaults
    machine_line(tree)           the line a benchmark table starts with: commit, CPUs, torch, Python
    best_of(fn, repeat)          seconds per call of ``fn`` in this process: the fastest of ``repeat`` runs
    rss_bytes()                  this process's resident memory now (not its peak)
    top_shares(folded)           where a py-spy profile's samples went, by function

Peak memory is the largest sum of PSS (proportional set size: a page shared by k processes, such as
torch's libraries or shards in shared memory, counts 1/k in each) over the process and every descendant,
sampled every ``every_s`` seconds; a sum of RSS would count torch's libraries once per worker. Reading
``smaps_rollup`` takes a process's mmap lock, so sampling often slows it down: 0.5 s by default. Linux
only (``/proc``); elsewhere the PSS peak reads 0 and the RSS peak still holds.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

__all__ = ["Measured", "Outcome", "best_of", "commit_of", "emit", "machine_line", "measure", "outcome_of", "result_of", "rss_bytes",
           "run_command", "run_env", "top_shares", "tree_pids"]

RESULT_TAG = "P2PFL_RESULT "


@dataclass(frozen=True)
class Measured:
    """One command's run as its parent saw it."""

    returncode: int  # negative: killed by that signal
    timed_out: bool
    wall_s: float
    peak_pss_mib: float  # the whole process tree's, sampled
    peak_rss_mib: float  # the command's own process (wait4), exact
    stdout: str
    stderr: str

    @property
    def failure(self) -> Optional[str]:
        """Why the run failed in one line, or None when it exited 0 in time."""
        if self.timed_out:
            return f"stopped after {self.wall_s:.0f} s"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode} (out of memory?)"
        if self.returncode:
            lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
            return (lines[-1] if lines else f"exit status {self.returncode}")[:160]
        return None


def _proc_table() -> list[tuple[int, int, int]]:
    """``(pid, ppid, session id)`` of every process now."""
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        rows.append((int(entry), int(fields[1]), int(fields[3])))
    return rows


def tree_pids(root: int) -> set[int]:
    """``root``, its descendants by ppid chain, and whatever stayed in its session (orphans reparented)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    found = {pid for pid, _, sid in table if sid == root}
    for pid, ppid, _ in table:
        children.setdefault(ppid, []).append(pid)
    todo = [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(c for c in children.get(pid, ()) if c not in found)
    return found


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class _PeakPss(threading.Thread):
    """Keeps the largest summed PSS of a process tree, sampled every ``every_s``."""

    def __init__(self, pid: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak_kib = pid, every_s, 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            if os.path.isdir("/proc"):
                self.peak_kib = max(self.peak_kib, sum(_pss_kib(p) for p in tree_pids(self.pid)))
            self._done.wait(self.every_s)

    def stop(self) -> float:
        """Stop sampling; the peak in MiB."""
        self._done.set()
        self.join()
        return self.peak_kib / 1024


def measure(cmd: Sequence[str], *, timeout_s: float, cwd: Optional[Path] = None,
            env: Optional[Mapping[str, str]] = None, every_s: float = 0.5) -> Measured:
    """Run ``cmd`` in a new session; on timeout kill the session. Whatever it left running is killed too.

    Output goes to temporary files, not pipes: a worker left behind by a killed run would keep a pipe open.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=None if env is None else dict(env), stdout=out, stderr=err,
                                text=True, start_new_session=True)
        sampler = _PeakPss(proc.pid, every_s)
        sampler.start()
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if not timed_out and time.perf_counter() - t0 > timeout_s:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # workers it left behind
        peak = sampler.stop()
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, timed_out, wall, peak, usage.ru_maxrss / 1024, out.read(), err.read())


def emit(result: Mapping[str, Any]) -> None:
    """Print a child's figures as the one line ``result_of`` reads back."""
    print(RESULT_TAG + json.dumps(dict(result)), flush=True)


def result_of(m: Measured) -> Optional[dict[str, Any]]:
    """The figures the child emitted last, or None when it emitted none."""
    tagged = [line[len(RESULT_TAG):] for line in m.stdout.splitlines() if line.startswith(RESULT_TAG)]
    return json.loads(tagged[-1]) if tagged else None


@dataclass(frozen=True)
class Outcome:
    """A child's run as a table row needs it: its status, wall seconds, the peak PSS of its tree, its figures."""

    status: str  # "ok", "timeout", "n/a (<why>)" (it emitted {"na": why}) or "failed: <why>"
    wall_s: float
    peak_pss_mib: float
    data: dict[str, Any] = field(default_factory=dict)  # what it emitted; empty unless ok

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def outcome_of(m: Measured) -> Outcome:
    """The ``Outcome`` of a measured child that ``emit``s its figures."""
    data = result_of(m)
    if m.failure or data is None:
        status = "timeout" if m.timed_out else f"failed: {m.failure or 'no result'}"
    else:
        status = f"n/a ({data['na']})" if "na" in data else "ok"
    return Outcome(status, m.wall_s, m.peak_pss_mib, data if data is not None and status == "ok" else {})


def run_command(scenario: str | Path, sets: Sequence[str], out: str | Path, *,
                entry: Sequence[str] = ("-m", "p2pfl")) -> list[str]:
    """``p2pfl run SCENARIO --quiet --out OUT --set S ...`` in a fresh interpreter; ``entry``: the arguments that
    start p2pfl's command line in it (``-m p2pfl``, ``-m p2pfl.cli`` for an older tree, or ``-c CODE``)."""
    return [sys.executable, *entry, "run", str(scenario), "--quiet", "--out", str(out),
            *(arg for s in sets for arg in ("--set", s))]


def run_env(extra: Mapping[str, str] = {}) -> dict[str, str]:
    """This process's environment without glibc's ``MALLOC_*`` tunables (a measured child allocates as glibc does
    by default), then ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **extra}


def _git(tree: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def commit_of(tree: Path) -> str:
    """The short commit ``tree`` has checked out ("" when git cannot tell)."""
    return _git(tree, "rev-parse", "--short", "HEAD")


def machine_line(tree: Path, note: str = "") -> str:
    """The commit of ``tree`` (``+dirty`` with uncommitted changes), CPUs, torch and Python versions."""
    commit = commit_of(tree) or "unknown"
    dirty = "+dirty" if _git(tree, "status", "--porcelain", "--untracked-files=no") else ""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return (f"commit {commit}{dirty}; CPUs {os.cpu_count()} (usable {usable}); torch {torch_version}; "
            f"python {sys.version.split()[0]}{'; ' + note if note else ''}")


def best_of(fn: Callable[[], Any], repeat: int, calls: int = 1) -> float:
    """Seconds per call: after one warm-up call, the fastest of ``repeat`` runs of ``calls`` calls (the fastest is
    the least disturbed by a loaded machine)."""
    fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def rss_bytes() -> int:
    """Resident memory of this process now, from ``/proc/self/status`` (Linux only)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS"))


def top_shares(folded: Path, k: int = 8) -> dict[str, list[tuple[str, float]]]:
    """Where a run's samples went, from py-spy's raw (folded) stacks, in % of all samples, ``k`` largest each:
    ``self`` (the innermost frame's function) and ``p2pfl`` (inclusive, the package's own functions under 60 %,
    i.e. not the run's outer loops)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    samples = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        samples += c
        frames = stack.split(";")[1:]  # frame 0 names the process
        if frames:
            leaf = frames[-1].split(" (")[0]
            own[leaf] = own.get(leaf, 0) + c
        for name in {f.split(" (")[0] for f in frames if "p2pfl/" in f}:
            inclusive[name] = inclusive.get(name, 0) + c

    def ranked(counts: dict[str, int], cap: float) -> list[tuple[str, float]]:
        shares = [(name, round(100 * c / max(samples, 1), 1)) for name, c in counts.items()]
        return sorted((x for x in shares if x[1] < cap), key=lambda x: -x[1])[:k]

    return {"self": ranked(own, 101.0), "p2pfl": ranked(inclusive, 60.0)}
