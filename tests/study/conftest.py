"""Fixtures of the study tests."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Optional

import pytest


@pytest.fixture
def inline_pool(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, Optional[str]]]:
    """The sweep's worker pool replaced by one that runs nothing: each cell it is handed completes at once in
    0.5 s; returns what it was handed, in order: (cell folder name, the cell's share of the cores, its
    evaluation folder)."""
    from p2pfl.study import runner

    handed: list[tuple[str, int, Optional[str]]] = []

    class InlinePool:
        def __init__(self, **_: object) -> None:
            pass

        def submit(self, fn: object, scenario: object, out: str, data: bytes, argv: list[str], share: int,
                   evaluations: Optional[str], progress: Optional[str] = None) -> Future[float]:
            handed.append((Path(out).name, share, evaluations))
            fut: Future[float] = Future()
            fut.set_result(0.5)
            return fut

        def shutdown(self, **_: object) -> None:
            pass

    monkeypatch.setattr(runner, "ProcessPoolExecutor", InlinePool)
    return handed
