"""Trace files of the dynamics: availability (``device,t_off,t_on``) and trajectories (``t,device,x,y``).

Plain CSV, an optional header line naming the columns. Sizes are checked before reading and every
bad row is a one-line error naming the file, the line and the fix.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from p2pfl.errors import ConfigError
from p2pfl.limits import fmt_bytes

__all__ = ["MAX_TRACE_BYTES", "read_churn_trace", "read_trajectory"]

#: Largest trace file read (a trace of 10^5 devices x 100 periods is about 3 MB).
MAX_TRACE_BYTES = 256 * 2**20


def _rows(path: str, columns: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each data row; the header line, if any, must name ``columns``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: trace file not found; check the path (relative paths start at the scenario's folder)")
    size = p.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ConfigError(f"{path}: {fmt_bytes(size)} trace; at most {fmt_bytes(MAX_TRACE_BYTES)}; split or thin it")
    with open(p, newline="", encoding="utf-8") as fh:
        for lineno, cells in enumerate(csv.reader(fh), start=1):
            cells = [c.strip() for c in cells]
            if not cells or all(not c for c in cells) or cells[0].startswith("#"):
                continue
            if lineno == 1 and tuple(c.lower() for c in cells) == columns:
                continue
            if len(cells) != len(columns):
                raise ConfigError(f"{path}:{lineno}: expected {len(columns)} columns {','.join(columns)}; "
                                  f"got {len(cells)}")
            yield lineno, cells


def _number(text: str, path: str, lineno: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{path}:{lineno}: {column} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{path}:{lineno}: {column} must be finite; got {text}")
    return value


def _device(text: str, n: int, path: str, lineno: int) -> int:
    if not text.isdigit() or int(text) >= n:
        raise ConfigError(f"{path}:{lineno}: device {text!r} does not exist; device ids are 0..{n - 1}")
    return int(text)


def read_churn_trace(path: str, n: int) -> list[tuple[float, int, bool]]:
    """(time, device, online) switches from ``device,t_off,t_on`` rows (empty ``t_on``: stays off).

    A device's offline periods must not overlap.
    """
    periods: dict[int, list[tuple[float, float, int]]] = {}
    for lineno, (dev, t_off, t_on) in _rows(path, ("device", "t_off", "t_on")):
        d = _device(dev, n, path, lineno)
        off = _number(t_off, path, lineno, "t_off")
        on = math.inf if t_on == "" else _number(t_on, path, lineno, "t_on")
        if off < 0 or not on > off:
            raise ConfigError(f"{path}:{lineno}: need 0 <= t_off < t_on; got t_off={t_off}, t_on={t_on or 'empty'}")
        periods.setdefault(d, []).append((off, on, lineno))
    out: list[tuple[float, int, bool]] = []
    for d, ps in sorted(periods.items()):
        ps.sort()
        for (_, on, _), (off2, _, line2) in itertools.pairwise(ps):
            if off2 < on:
                raise ConfigError(f"{path}:{line2}: device {d}'s offline periods overlap; merge them")
        for off, on, _ in ps:
            out.append((off, d, False))
            if math.isfinite(on):
                out.append((on, d, True))
    return sorted(out, key=lambda r: (r[0], r[1]))


def read_trajectory(path: str, n: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per device, waypoint times (increasing) and positions (k, 2) from ``t,device,x,y`` rows."""
    points: dict[int, list[tuple[float, float, float]]] = {}
    for lineno, (t, dev, x, y) in _rows(path, ("t", "device", "x", "y")):
        d = _device(dev, n, path, lineno)
        tt = _number(t, path, lineno, "t")
        if tt < 0:
            raise ConfigError(f"{path}:{lineno}: t must be >= 0; got {t}")
        points.setdefault(d, []).append((tt, _number(x, path, lineno, "x"), _number(y, path, lineno, "y")))
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for d, pts in sorted(points.items()):
        pts.sort()
        times = np.array([p[0] for p in pts])
        if np.any(np.diff(times) == 0):
            raise ConfigError(f"{path}: device {d} has two waypoints at the same time; keep one")
        out[d] = (times, np.array([[p[1], p[2]] for p in pts]))
    return out
