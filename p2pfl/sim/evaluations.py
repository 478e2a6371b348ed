"""A run's evaluation folder: the results of the federation's scoring jobs (robot rollouts), kept between runs.

A robot run spends most of its time in rollouts (LIBERO: up to 39 minutes an evaluation, five a run), and a
study's cell that a session ends before it is complete is lost. With an evaluation folder, every scoring job
whose ``JobEvaluation.kept`` says how is written there as it completes (one JSON file per job, named by its
digest, written whole or not at all), and a later run of the same scenario reads it instead of running the
job: the simulation replays, the rollouts it already did cost nothing, and the run's files are the same
bytes as a run that did them all (the result is what the job gives; its compute is charged either way).
``p2pfl sweep --archive`` gives each cell the folder ``<archive>/.evaluations/<cell id>`` and removes it
once the cell is archived. Files are read as JSON only, each checked for size first.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Optional

from p2pfl.data.evaluation import KeptResult
from p2pfl.errors import UserError

__all__ = ["EvaluationStore", "MAX_RESULT_BYTES"]

#: A kept result is a few numbers per task: a file larger than this is not one of ours.
MAX_RESULT_BYTES = 1 << 20
_DIGEST = re.compile(r"[0-9a-f]{40}")


class EvaluationStore:
    """The kept results in ``folder`` (made when the first is written) of jobs run at ``threads`` torch threads
    (part of each file's name: torch's CPU kernels give other bits at another thread count)."""

    def __init__(self, folder: str | Path, threads: int) -> None:
        self.folder = Path(folder)
        self.threads = threads
        self.read = self.written = 0  # results read instead of run, and written

    def _path(self, kept: KeptResult) -> Path:
        if not _DIGEST.fullmatch(kept.digest):
            raise ValueError(f"a kept result's digest must be 40 hex digits; got {kept.digest!r}")
        return self.folder / f"{kept.digest}-t{self.threads}.json"

    def get(self, kept: KeptResult) -> Optional[Any]:
        """The kept result of the job ``kept`` names, None when there is none."""
        path = self._path(kept)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        try:
            if size > MAX_RESULT_BYTES:
                raise ValueError(f"{size:,} bytes, more than a result's {MAX_RESULT_BYTES:,}")
            value = kept.decode(json.loads(path.read_bytes()))
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise UserError(f"{path}: not a kept evaluation result ({err}); remove it and the job runs "
                            "again") from None
        self.read += 1
        return value

    def put(self, kept: KeptResult, result: Any) -> None:
        """Keep ``result`` of the job ``kept`` names (atomically: a reader finds it whole or not at all)."""
        path = self._path(kept)
        data = json.dumps(kept.encode(result)).encode("utf-8")  # in its order: a mapping reads back the same
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.written += 1
