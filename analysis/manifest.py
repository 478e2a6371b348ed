"""The analysis wing's manifest (``analysis/manifest.yaml``): study -> study YAMLs -> archive -> report -> results.

    python -m analysis.manifest [NAME ...]      # the commands that regenerate them (every entry, or those named)
    python -m analysis.manifest --list          # one line per entry: its chain, study to results
    python -m analysis.manifest --check         # every path it names exists (exit 2 naming those that do not)

Loaded with ``yaml.safe_load`` and validated here (unknown keys, wrong types and bad paths are errors naming the
entry); ``analysis/reports/verdicts.py`` takes its list of claims pages from it (``claims_pages``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "analysis" / "manifest.yaml"
CELLS = "analysis/cells"
#: the folders of scripts: benchmarks, report builders, experiment drivers
WINGS = ("bench", "reports", "experiments")


class ManifestError(ValueError):
    """The manifest is malformed: the message names the entry and the field."""


@dataclass(frozen=True)
class Sweep:
    """One study YAML swept into its archive (``archive`` None: not archived; ``planned``: not run yet)."""

    study: str
    archive: str | None
    jobs: int
    planned: bool

    @property
    def out(self) -> str:
        """The sweep's run folder: ``runs/`` + the archive's path below ``analysis/cells`` (or the study's name)."""
        if self.archive is None:
            return f"runs/{Path(self.study).stem}"
        return "runs/" + self.archive.removeprefix(CELLS + "/")

    @property
    def command(self) -> str:
        cmd = f"p2pfl sweep {self.study} --jobs {self.jobs} --out {self.out}"
        return cmd if self.archive is None else f"{cmd} --archive {self.archive}"


@dataclass(frozen=True)
class Entry:
    """A study (sweeps, then a report over their cells), an experiment or a benchmark (a script run by itself)."""

    section: str
    name: str
    script: str | None
    commands: tuple[str, ...]
    results: tuple[str, ...]
    sweeps: tuple[Sweep, ...] = ()
    claims: str | None = None
    note: str | None = None

    def paths(self) -> list[tuple[str, bool]]:
        """Every path this entry names, with whether it may be absent (a planned archive)."""
        out = [(s.study, False) for s in self.sweeps]
        out += [(s.archive, s.planned) for s in self.sweeps if s.archive is not None]
        out += [(self.script, False)] if self.script else []
        return out + [(r, False) for r in self.results]


@dataclass(frozen=True)
class Manifest:
    entries: tuple[Entry, ...]

    def entry(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise ManifestError(f"no entry {name!r} (entries: {', '.join(e.name for e in self.entries)})")

    def claims_pages(self) -> list[tuple[str, str]]:
        """(claims page, the paper it tests), in the manifest's order: the pages ``verdicts.md`` gathers."""
        return [(e.results[0], e.claims) for e in self.entries if e.claims is not None]

    def archives(self) -> list[str]:
        return [s.archive for e in self.entries for s in e.sweeps if s.archive is not None]

    def scripts(self) -> list[str]:
        return [e.script for e in self.entries if e.script is not None]

    def results(self) -> set[str]:
        return {r for e in self.entries for r in e.results}

    def missing(self, root: Path = ROOT) -> list[str]:
        """The paths named that do not exist under ``root`` (a planned archive may be absent)."""
        return [f"{e.name}: {p}" for e in self.entries for p, optional in e.paths()
                if not optional and not (root / p).exists()]


def _fields(raw: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}: a mapping expected, got {type(raw).__name__}")
    missing, unknown = required - raw.keys(), raw.keys() - required - optional
    if missing or unknown:
        raise ManifestError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(sorted(missing))}"] if missing else [])
            + ([f"unknown {', '.join(sorted(map(str, unknown)))}"] if unknown else [])))
    return raw


def _text(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ManifestError(f"{where}: a non-empty string expected, got {raw!r}")
    return raw


def _texts(raw: Any, where: str, *, empty: bool = True) -> tuple[str, ...]:
    if not isinstance(raw, list) or (not raw and not empty):
        raise ManifestError(f"{where}: a {'' if empty else 'non-empty '}list of strings expected, got {raw!r}")
    return tuple(_text(v, f"{where}[{i}]") for i, v in enumerate(raw))


def _path(raw: Any, where: str, under: str) -> str:
    p = _text(raw, where)
    if Path(p).is_absolute() or ".." in Path(p).parts or not p.startswith(under):
        raise ManifestError(f"{where}: {p!r} is not a path under {under}")
    return p


def _sweep(raw: Any, where: str) -> Sweep:
    f = _fields(raw, where, {"study"}, {"archive", "jobs", "planned"})
    jobs, planned = f.get("jobs", 2), f.get("planned", False)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ManifestError(f"{where}.jobs: a positive integer expected, got {jobs!r}")
    if not isinstance(planned, bool):
        raise ManifestError(f"{where}.planned: true or false expected, got {planned!r}")
    archive = _path(f["archive"], f"{where}.archive", CELLS + "/") if "archive" in f else None
    if planned and archive is None:
        raise ManifestError(f"{where}: planned names an archive that does not exist yet; this sweep has none")
    return Sweep(_path(f["study"], f"{where}.study", "scenarios/studies/"), archive, jobs, planned)


def _report_script(command: str, where: str) -> str | None:
    """The script a report command runs (``python analysis/reports/X.py ...``), or None for ``p2pfl report``."""
    words = shlex.split(command)
    if words[:2] == ["p2pfl", "report"]:
        return None
    if len(words) >= 2 and words[0] == "python":
        return _path(words[1], f"{where}.report", "analysis/reports/")
    raise ManifestError(f"{where}.report: 'python analysis/reports/<script>.py ...' or 'p2pfl report ...' "
                        f"expected, got {command!r}")


def parse(raw: Any) -> Manifest:
    """The manifest from its parsed YAML; ``ManifestError`` naming the entry and field for anything malformed."""
    top = _fields(raw, "manifest", {"studies", "experiments", "benchmarks", "verdicts"}, set())
    entries: list[Entry] = []
    for section in ("studies", "experiments", "benchmarks"):
        if not isinstance(top[section], list):
            raise ManifestError(f"{section}: a list of entries expected")
        for i, item in enumerate(top[section]):
            where = f"{section}[{i}]"
            if section == "studies":
                f = _fields(item, where, {"name", "sweeps", "report", "results"}, {"claims", "before", "after", "note"})
            else:
                f = _fields(item, where, {"name", "script", "regenerate", "results"}, {"claims", "note"})
            name = _text(f["name"], f"{where}.name")
            where = f"{section} {name}"
            results = tuple(_path(r, f"{where}.results[{j}]", "analysis/")
                            for j, r in enumerate(_texts(f["results"], f"{where}.results")))
            claims = _text(f["claims"], f"{where}.claims") if "claims" in f else None
            if claims is not None and not (results and results[0].startswith("analysis/results/")
                                           and results[0].endswith(".md")):
                raise ManifestError(f"{where}: claims need the claims page (a .md in analysis/results) first in results")
            note = _text(f["note"], f"{where}.note") if "note" in f else None
            if section == "studies":
                if not isinstance(f["sweeps"], list) or not f["sweeps"]:
                    raise ManifestError(f"{where}.sweeps: a non-empty list expected")
                sweeps = tuple(_sweep(s, f"{where}.sweeps[{j}]") for j, s in enumerate(f["sweeps"]))
                report = _text(f["report"], f"{where}.report")
                commands = (*_texts(f.get("before", []), f"{where}.before"), *(s.command for s in sweeps),
                            *_texts(f.get("after", []), f"{where}.after"), report)
                entries.append(Entry(section, name, _report_script(report, where), commands, results, sweeps,
                                     claims, note))
            else:
                script = _path(f["script"], f"{where}.script", f"analysis/{'bench' if section == 'benchmarks' else 'experiments'}/")
                commands = _texts(f["regenerate"], f"{where}.regenerate", empty=False)
                if not all(script in c for c in commands):
                    raise ManifestError(f"{where}.regenerate: every command runs {script}")
                entries.append(Entry(section, name, script, commands, results, claims=claims, note=note))
    f = _fields(top["verdicts"], "verdicts", {"script", "regenerate", "results"}, {"note"})
    entries.append(Entry("verdicts", "verdicts", _path(f["script"], "verdicts.script", "analysis/reports/"),
                         _texts(f["regenerate"], "verdicts.regenerate", empty=False),
                         tuple(_path(r, "verdicts.results", "analysis/results/") for r in _texts(f["results"], "verdicts.results")),
                         note=_text(f["note"], "verdicts.note") if "note" in f else None))
    names = [e.name for e in entries]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ManifestError(f"entries named twice: {', '.join(dup)}")
    archives = [a for e in entries for s in e.sweeps if (a := s.archive) is not None]
    if dup := sorted({a for a in archives if archives.count(a) > 1}):
        raise ManifestError(f"archives named by two sweeps: {', '.join(dup)}")
    return Manifest(tuple(entries))


def load(path: Path = MANIFEST) -> Manifest:
    """``analysis/manifest.yaml`` (or ``path``), parsed and validated."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ManifestError(f"{path}: not valid YAML: {err}") from None
    return parse(raw)


def regeneration(manifest: Manifest, names: list[str] | None = None) -> list[str]:
    """The shell lines that regenerate the named entries (every entry when None), each under a comment naming it."""
    picked = [manifest.entry(n) for n in names] if names else list(manifest.entries)
    lines: list[str] = []
    for e in picked:
        planned = [s.study for s in e.sweeps if s.planned]
        head = f"# {e.name} ({e.section}) -> {', '.join(e.results) or 'no committed results'}"
        lines += [head, *(f"# {text}" for text in ([e.note] if e.note else []) + (
            [f"planned (not archived yet): {', '.join(planned)}"] if planned else [])), *e.commands, ""]
    return lines


def chain(e: Entry) -> list[str]:
    """The entry's chain, a line per link: study YAMLs -> archives -> script -> results."""
    links = [("study", [s.study for s in e.sweeps]),
             ("archive", [f"{s.archive}{' (planned)' if s.planned else ''}" for s in e.sweeps if s.archive]),
             ("script", [e.script or e.commands[-1]]), ("results", list(e.results))]
    return [f"{e.name} ({e.section})"] + [f"  {k:8} {v}" for k, vs in links for v in vs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.manifest", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="entries to print (default: all)")
    ap.add_argument("--list", action="store_true", help="one line per entry: study YAMLs -> archives -> script -> results")
    ap.add_argument("--check", action="store_true", help="check that every path named exists")
    args = ap.parse_args(argv)
    try:
        manifest = load()
        picked = [manifest.entry(n) for n in args.names] if args.names else list(manifest.entries)
    except ManifestError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        missing = manifest.missing()
        for m in missing:
            print(f"missing: {m}", file=sys.stderr)
        return 2 if missing else 0
    print("\n".join(line for e in picked for line in chain(e)) if args.list else
          "\n".join(regeneration(manifest, args.names)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
