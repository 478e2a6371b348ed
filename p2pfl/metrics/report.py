"""Compare run directories: a markdown table and accuracy-vs-time / accuracy-vs-bytes plots.

Reads only the outputs contract (``summary.json``, ``events.jsonl``), so it works
on any run, from the CLI (``p2pfl report RUN [RUN ...] --out x.png``) or Python.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from p2pfl.errors import UserError

__all__ = ["RunRecord", "load_run", "time_to_fraction", "bytes_at", "report_table", "report_figure"]


@dataclass(frozen=True)
class RunRecord:
    """What a report needs from one run directory."""

    path: Path
    summary: dict[str, Any]
    send_times: list[float]  # completion time of every transmission, sorted
    send_cum_bytes: list[int]  # bytes sent up to and including each of those


def load_run(path: str | Path) -> RunRecord:
    """Read ``summary.json`` and the send events of ``events.jsonl``."""
    path = Path(path)
    summary_file = path / "summary.json"
    if not summary_file.is_file():
        raise UserError(f"{path}: not a run directory (no summary.json); pass the folder written by 'p2pfl run'")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    times, cum, total = [], [], 0
    events = path / "events.jsonl"
    if events.is_file():
        with open(events, encoding="utf-8") as fh:
            for line in fh:
                e = json.loads(line)
                if e["kind"] in ("send", "drop"):
                    total += e["bytes"]
                    times.append(e["t"])
                    cum.append(total)
    return RunRecord(path, summary, times, cum)


def bytes_at(run: RunRecord, t: float) -> int:
    """Bytes the whole fleet had sent by simulated time ``t``."""
    i = bisect_right(run.send_times, t)
    return run.send_cum_bytes[i - 1] if i else 0


def time_to_fraction(summary: dict[str, Any], fraction: float = 0.9) -> Optional[float]:
    """Simulated time at which mean accuracy first reached ``fraction`` of its final value."""
    curve = summary.get("accuracy_curve") or []
    final = summary.get("accuracy_mean")
    if not curve or final is None:
        return None
    for point in curve:
        if point["accuracy_mean"] >= fraction * final:
            return point["t"]
    return None


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def report_table(runs: Sequence[RunRecord]) -> str:
    """A markdown table of the headline figures of each run."""
    head = ("| run | protocol | devices | accuracy mean | worst device | ARI | bytes total | bytes / device | "
            "messages | compute FLOPs | sim time s | t(90% final) s |")
    lines = [head, "|" + "---|" * 12]
    for r in runs:
        s = r.summary
        n = max(s.get("n_devices", 1), 1)
        lines.append(
            f"| {r.path.name} | {s['protocol']} | {s.get('n_devices')} | {_fmt(s.get('accuracy_mean'), '.4f')} | "
            f"{_fmt(s.get('accuracy_worst'), '.4f')} | {_fmt(s.get('ari'), '.3f')} | {s['bytes_total']:,} | "
            f"{s['bytes_total'] / n:,.0f} | {s['messages_total']:,} | {s['compute_flops_total']:.3e} | "
            f"{s['sim_time_s']:.2f} | {_fmt(time_to_fraction(s), '.2f')} |")
    return "\n".join(lines)


def report_figure(runs: Sequence[RunRecord], out: str | Path) -> Path:
    """Two panels: mean accuracy vs simulated time, and vs bytes sent so far."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    ax_t, ax_b = fig.subplots(1, 2)
    for r in runs:
        curve = r.summary.get("accuracy_curve") or []
        if not curve:
            continue
        label = f"{r.path.name} ({r.summary['protocol']})"
        ts = [p["t"] for p in curve]
        acc = [p["accuracy_mean"] for p in curve]
        ax_t.plot(ts, acc, marker="o", ms=3, label=label)
        ax_b.plot([max(bytes_at(r, t), 1) for t in ts], acc, marker="o", ms=3, label=label)
    ax_t.set_xlabel("simulated time (s)")
    ax_b.set_xlabel("bytes sent by the fleet (log; a run that sent none is drawn at 1)")
    ax_b.set_xscale("log")
    for ax in (ax_t, ax_b):
        ax.set_ylabel("mean device accuracy")
        ax.grid(alpha=0.3)
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out
