"""analysis/manifest.yaml: complete (every study YAML, archive, script and result file in it), every path in it real,
the commands it prints the ones the committed pages state, malformed manifests refused by name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.manifest import CELLS, WINGS, ManifestError, load, main, parse, regeneration
from tests.helpers import analysis_module

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = load()


def _tracked(*patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def test_every_path_it_names_exists_but_a_planned_archive():
    assert MANIFEST.missing() == []
    assert main(["--check"]) == 0


def test_every_script_study_yaml_and_result_file_is_in_it():
    scripts = sorted(str(p.relative_to(ROOT)) for wing in WINGS for p in (ROOT / "analysis" / wing).glob("*.py"))
    assert sorted(MANIFEST.scripts()) == scripts
    assert not list((ROOT / "analysis").glob("*_report.py")) and not list((ROOT / "analysis").glob("bench_*.py"))
    studies = {s.study for e in MANIFEST.entries for s in e.sweeps}
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios" / "studies").rglob("*.yaml")) == sorted(studies)
    results = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "analysis" / "results").iterdir())
    assert [r for r in results if r not in MANIFEST.results()] == []


def test_every_archive_under_analysis_cells_is_in_it():
    """An entry of analysis/cells is covered when it is an archive of the manifest, or a folder of covered entries
    (analysis/cells/headline holds n100, n1000, ...); a folder of run directories that no sweep names is not."""
    archives = set(MANIFEST.archives())

    def uncovered(path: Path, depth: int) -> list[str]:
        rel = str(path.relative_to(ROOT))
        if rel in archives:
            return []
        if depth == 2 or not path.is_dir() or not any(path.iterdir()):
            return [rel]
        return [u for child in sorted(path.iterdir()) for u in uncovered(child, depth + 1)]

    assert [u for top in sorted((ROOT / CELLS).iterdir()) for u in uncovered(top, 1)] == []


def test_each_archive_is_swept_from_its_own_study_yaml():
    """A sweep's archive is what the study YAML's own header says it archives to, where the header names one."""
    for e in MANIFEST.entries:
        for s in e.sweeps:
            header = (ROOT / s.study).read_text(encoding="utf-8")
            named = re.findall(r"--archive\s+(analysis/cells/\S+)", header)
            assert not named or named == [s.archive], (s.study, named, s.archive)


def test_a_committed_page_states_the_command_the_manifest_regenerates_it_with():
    for e in MANIFEST.entries:
        if e.section == "benchmarks" or (e.section == "studies" and e.script is None):
            continue  # a benchmark's page quotes many runs; a 'p2pfl report' page is written by hand around it
        pages = " ".join((ROOT / r).read_text(encoding="utf-8") for r in e.results if r.endswith(".md"))
        if not pages:
            continue  # libero_rescore writes JSON into its archive (libero_object.md quotes the command)
        for command in ([e.commands[-1]] if e.section == "studies" else e.commands):
            assert command in pages, (e.name, command)


def test_verdicts_gathers_the_claims_pages_in_the_manifests_order():
    verdicts = analysis_module("verdicts")
    assert verdicts.REPORTS == (("conditional.md", "Client-Conditional FL via local training data statistics"),
                                ("rnd_recovery.md", "RND for clustered FL (federation discovery)"),
                                ("feddrman.md", "FedDRMan (generated MuJoCo suites)"),
                                ("libero_object.md", "FedDRMan (real LIBERO-Object)"),
                                ("rnd_overhead.md", "RND for clustered FL (clustering overhead)"))


def test_the_regeneration_commands_are_built_from_the_sweeps(capsys):
    assert regeneration(MANIFEST, ["headline_pilot"]) == [
        "# headline_pilot (studies) -> analysis/results/headline_pilot.md, analysis/results/headline_pilot.png",
        "p2pfl sweep scenarios/studies/headline_pilot.yaml --jobs 2 --out runs/headline_pilot "
        "--archive analysis/cells/headline_pilot",
        "python analysis/reports/headline_pilot.py analysis/cells/headline_pilot", ""]
    lines = regeneration(MANIFEST, ["libero_object"])
    assert lines[2].startswith("python -m p2pfl.robotics.libero_demos") and lines[2].endswith(
        "--out ~/.cache/p2pfl/libero_lod/libero_object")  # a folded YAML line is one command
    assert lines[3:6] == [
        "p2pfl sweep scenarios/studies/libero_object.yaml --jobs 1 --out runs/libero_object "
        "--archive analysis/cells/libero_object",
        "python analysis/experiments/libero_rescore.py analysis/cells/libero_object",
        "python analysis/reports/libero_report.py analysis/cells/libero_object"]
    assert main(["dynamics"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("p2pfl sweep scenarios/studies/dynamics_churn.yaml --jobs 2 --out runs/dynamics/churn "
                      "--archive analysis/cells/dynamics/churn")
    assert main(["no_such_study"]) == 2
    assert "no entry 'no_such_study'" in capsys.readouterr().err
    assert main(["--list", "rnd_recovery"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "rnd_recovery (studies)"
    assert "  archive  analysis/cells/rnd_authors_skew_calibration" in listed
    assert main(["--list", "headline_v3_pilot"]) == 0
    assert "  archive  analysis/cells/headline_v3/pilot (planned)" in capsys.readouterr().out.splitlines()


def _raw() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "analysis" / "manifest.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["studies"][0].update(archive="x"), r"studies\[0\]: unknown archive"),
    (lambda m: m["studies"][1]["sweeps"][0].update(jobs=0), r"studies rnd_recovery.sweeps\[0\].jobs: a positive"),
    (lambda m: m["studies"][-1]["sweeps"][0].update(planned=True), r"studies tour.sweeps\[0\]: planned names an archive"),
    (lambda m: m["studies"][0]["sweeps"][0].update(archive="../cells/x"), r"is not a path under analysis/cells/"),
    (lambda m: m["studies"][0].update(report="bash make.sh"), r"studies conditional.report: 'python analysis/reports"),
    (lambda m: m["studies"][0].update(results=["analysis/results/conditional.png"]), r"conditional: claims need"),
    (lambda m: m["experiments"][0].update(regenerate=["python other.py"]), r"every command runs analysis/experiments"),
    (lambda m: m["studies"][1]["sweeps"].append(m["studies"][0]["sweeps"][0]), r"archives named by two sweeps: "
                                                                                 r"analysis/cells/conditional/e1_k"),
    (lambda m: m["benchmarks"].append(m["benchmarks"][0]), r"entries named twice: bench_executors"),
    (lambda m: m.pop("verdicts"), r"manifest: missing verdicts"),
])
def test_a_malformed_manifest_is_refused_naming_the_entry_and_field(edit, message):
    raw = _raw()
    edit(raw)
    with pytest.raises(ManifestError, match=message):
        parse(raw)


def test_no_text_names_a_script_at_its_old_flat_path():
    """Scripts live in analysis/{bench,reports,experiments}/; a path analysis/<script>.py in any tracked text (but the
    archive) is a stale reference. bench_heap.py is history: merged into bench_scale.py before the move."""
    stale = []
    for name in _tracked("*.py", "*.md", "*.yaml", "*.toml", ".ci/*"):
        if name.startswith(CELLS) or not (ROOT / name).is_file():
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        stale += [f"{name}: {m}" for m in re.findall(r"(?<![\w/])analysis/([a-z_]+)\.py", text)
                  if m not in ("manifest", "bench_heap")]
    assert stale == []
