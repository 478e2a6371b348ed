"""Python API: ``p2pfl.run(...)`` with the same contract as ``p2pfl run``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from p2pfl.config.loader import load, load_dict
from p2pfl.config.scenario import Scenario
from p2pfl.errors import UserError
from p2pfl.metrics.rundir import discard_run_dir, manifest, start_run_dir, write_run_dir

__all__ = ["RunResult", "run", "resolve", "default_out_dir"]


@dataclass(frozen=True)
class RunResult:
    """What a run produced: the summary fields (also as attributes), timing and the run directory."""

    summary: dict[str, Any]
    timing: dict[str, float]
    scenario: Scenario
    out: Optional[Path] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        summary = self.__dict__.get("summary", {})
        if name in summary:
            return summary[name]
        raise AttributeError(name)

    @property
    def wall_s(self) -> float:
        return self.timing["wall_s"]


def resolve(scenario: str | Path | Mapping[str, Any] | Scenario, *, seed: Optional[int] = None,
            overrides: Sequence[str] = (), unset: Sequence[str] = ()) -> Scenario:
    """A validated Scenario from a path, a mapping or a Scenario (``unset`` keys removed, overrides and seed applied)."""
    if isinstance(scenario, Scenario):
        if not overrides and not unset and seed is None:
            return scenario
        scenario = scenario.model_dump(mode="json")
    if isinstance(scenario, Mapping):
        return load_dict(scenario, overrides=overrides, seed=seed, unset=unset)
    return load(scenario, overrides=overrides, seed=seed, unset=unset)


def default_out_dir(scenario: Scenario, root: Path = Path("runs")) -> Path:
    """``runs/<name>-seed<seed>-<timestamp>``, made unique with a counter."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / f"{scenario.name}-seed{scenario.seed}-{stamp}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


#: The files of every run directory (``p2pfl.metrics.rundir``); ``extra_files`` may not replace them.
_RUN_FILES = ("scenario.yaml", "summary.json", "events.jsonl", "timing.json", "manifest.json")


def _check_extra_names(extra_files: Mapping[str, bytes], taken: Sequence[str]) -> None:
    """Extra files are plain file names, not one the run directory already has."""
    for name in extra_files:
        if not name or name in (".", "..") or "/" in name or "\\" in name or name in taken:
            raise UserError(f"extra_files: file name {name!r} is not allowed (a plain file name other than "
                            f"{', '.join(taken)}); choose another name")


def _setup_hook(sc: Scenario, on_setup: Optional[Callable[[str], None]]) -> Optional[Callable[[str], None]]:
    """The kernel's ``on_setup`` (a step name) turned into words for ``on_setup``."""
    if on_setup is None:
        return None
    from p2pfl.progress import setup_text

    def hook(step: str) -> None:
        on_setup(setup_text(sc, step))

    return hook


def run(scenario: str | Path | Mapping[str, Any] | Scenario, *, seed: Optional[int] = None,
        overrides: Sequence[str] = (), unset: Sequence[str] = (), out: Optional[str | Path] = None, write: bool = True,
        on_round: Optional[Callable[[], None]] = None, on_start: Optional[Callable[[int], None]] = None,
        on_setup: Optional[Callable[[str], None]] = None, argv: Optional[Sequence[str]] = None,
        extra_files: Optional[Mapping[str, bytes]] = None, cores: Optional[int] = None,
        evaluations: Optional[str | Path] = None) -> RunResult:
    """Validate, build, run and (unless ``write=False``) write the run directory.

    Raises ``p2pfl.errors.UserError`` for anything the user can fix; nothing is
    written in that case. ``unset`` removes dotted keys before ``overrides`` are set.
    Progress: ``on_setup(text)`` before each build step (what it does, in words),
    ``on_start(total)`` when the simulation begins, ``on_round()`` per node round.
    ``extra_files`` (file name -> bytes, e.g. a study's ``cell.json``) are written into
    the run directory with the protocol's artifacts, in the same atomic rename.
    ``cores``: the cores the scenario's executor may use (``executor: auto`` and the default
    ``workers`` count them; a sweep passes each cell its share); None: every core this process may use.
    ``evaluations``: a folder that keeps the results of the federation's scoring jobs (robot rollouts)
    between runs of this scenario: a rerun reads them instead of running the jobs again, and writes the
    same bytes (``p2pfl.sim.evaluations``).
    A ``KeyboardInterrupt`` (Ctrl-C) propagates; the run directory is then written
    whole or not at all (``write_run_dir`` removes its temporary directory).
    """
    from p2pfl.engines import make_simulation

    t0 = time.perf_counter()
    extra_files = dict(extra_files or {})
    _check_extra_names(extra_files, _RUN_FILES)
    sc = resolve(scenario, seed=seed, overrides=overrides, unset=unset)
    out_path = tmp = None
    if write:
        out_path = Path(out) if out is not None else default_out_dir(sc)
        tmp = start_run_dir(out_path)  # events.jsonl streams into it while the run goes
    try:
        sim = make_simulation(sc, on_round=on_round, on_setup=_setup_hook(sc, on_setup),
                              events_path=None if tmp is None else tmp / "events.jsonl", cores=cores,
                              evaluations=None if evaluations is None else Path(evaluations))
        try:
            if on_start is not None:
                on_start(sim.progress_total())
            summary = sim.run()
        finally:
            sim.close()
        timing = {"wall_s": time.perf_counter() - t0, **sim.timing()}
        if out_path is not None:
            artifacts = sim.artifacts()
            _check_extra_names(extra_files, tuple(artifacts))
            write_run_dir(out_path, scenario=sc.model_dump(mode="json"), summary=summary, events=None,
                          timing=timing, manifest=manifest(argv), extra={**artifacts, **extra_files}, tmp=tmp)
    except BaseException:  # an error or Ctrl-C: leave nothing behind
        if tmp is not None:
            discard_run_dir(tmp)
        raise
    return RunResult(summary=summary, timing=timing, scenario=sc, out=out_path)
