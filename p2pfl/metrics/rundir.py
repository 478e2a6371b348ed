"""The run directory (outputs contract), written atomically: a temp dir, then one rename.

    <out>/scenario.yaml   fully resolved scenario (defaults filled, seed included)
    <out>/summary.json    deterministic figures of the run
    <out>/events.jsonl    one JSON object per recorded event
    <out>/timing.json     measured wall-clock figures (not deterministic)
    <out>/manifest.json   versions, git revision, command line
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

import yaml

from p2pfl.errors import UserError
from p2pfl.metrics.recorder import event_line

__all__ = ["check_out_dir", "start_run_dir", "write_run_dir", "discard_run_dir", "manifest", "dumps_json"]


def dumps_json(obj: Any) -> str:
    """Stable JSON text: fixed key order as built, floats in repr form, newline-terminated."""
    return json.dumps(obj, indent=1, allow_nan=False) + "\n"


def check_out_dir(out: Path) -> None:
    """Refuse to overwrite: an existing output directory is a user error, checked before the run."""
    if out.exists():
        raise UserError(f"output directory {out} already exists; choose another --out or remove it")


def _git_revision() -> Optional[str]:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return rev.stdout.strip() or None if rev.returncode == 0 else None


def manifest(argv: Optional[Iterable[str]] = None) -> dict[str, Any]:
    """Where a run came from: package and library versions, git revision, command line."""
    import numpy
    import simpy
    import torch

    from p2pfl.version import __version__

    return {
        "package": "p2pfl-sim",
        "version": __version__,
        "git_revision": _git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "simpy": simpy.__version__,
        "command": list(sys.argv if argv is None else argv),
    }


def start_run_dir(out: Path) -> Path:
    """Check that ``out`` is free and make its temporary sibling, where a run streams events.jsonl."""
    out = Path(out)
    check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))


def discard_run_dir(tmp: Path) -> None:
    """Remove a temporary run directory (a failed or interrupted run leaves nothing)."""
    _remove_tree(tmp)


def write_run_dir(out: Path, *, scenario: Mapping[str, Any], summary: Mapping[str, Any],
                  events: Optional[Iterable[Mapping[str, Any]]], timing: Mapping[str, Any],
                  manifest: Mapping[str, Any], extra: Optional[Mapping[str, bytes]] = None,
                  tmp: Optional[Path] = None) -> Path:
    """Write every file into a temporary sibling directory, then rename it to ``out``.

    ``tmp``: the sibling from ``start_run_dir``, where ``events`` None means events.jsonl is
    already written (streamed by the run).
    """
    out = Path(out)
    try:
        if tmp is None:
            tmp = start_run_dir(out)
        else:
            check_out_dir(out)
        (tmp / "scenario.yaml").write_text(yaml.safe_dump(dict(scenario), sort_keys=False), encoding="utf-8")
        (tmp / "summary.json").write_text(dumps_json(summary), encoding="utf-8")
        if events is not None:
            with open(tmp / "events.jsonl", "w", encoding="utf-8") as fh:
                for e in events:
                    fh.write(event_line(e))
        (tmp / "timing.json").write_text(dumps_json(timing), encoding="utf-8")
        (tmp / "manifest.json").write_text(dumps_json(manifest), encoding="utf-8")
        for name, data in (extra or {}).items():
            (tmp / name).write_bytes(data)
        os.rename(tmp, out)
    except BaseException:  # an error or Ctrl-C mid-write: leave nothing behind
        if tmp is not None:
            _remove_tree(tmp)
        raise
    return out


def _remove_tree(path: Path) -> None:
    """``rmtree`` that finishes even if Ctrl-C is pressed again while it runs."""
    while True:
        try:
            shutil.rmtree(path, ignore_errors=True)
            return
        except KeyboardInterrupt:
            continue
