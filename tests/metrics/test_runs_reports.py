"""The analysis reports stand on the results API: a report with a committed archive regenerates from it
byte for byte (the markdown; figures depend on the matplotlib version, so they are only written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import analysis_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_dynamics_report_regenerates_from_its_archive(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the report names the command that made it, relative to the repository
    report = analysis_module("dynamics_report")
    assert report.report_main(report.write, report.__doc__, "unused.md",
                              ["analysis/cells/dynamics", "--md", str(tmp_path / "dynamics.md")]) == 0
    assert (tmp_path / "dynamics.md").read_bytes() == (ROOT / "analysis/results/dynamics.md").read_bytes()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "dynamics_ari.png", "dynamics_churn.png", "dynamics_mobility_frames.png"]


@pytest.mark.slow
def test_the_headline_pilot_report_regenerates_from_its_archive(tmp_path):
    pilot = analysis_module("headline_pilot")
    md = tmp_path / "headline_pilot.md"
    assert pilot.report_main(pilot.write, pilot.__doc__, "unused.md",
                             [str(ROOT / "analysis/cells/headline_pilot"), "--md", str(md)]) == 0
    assert md.read_bytes() == (ROOT / "analysis/results/headline_pilot.md").read_bytes()
    assert [p.name for p in tmp_path.glob("*.png")] == ["headline_pilot.png"]


def test_an_archive_keeps_positions_only_where_a_report_draws_them():
    """The dynamics report draws one run's positions (rnd_gossip, mobility 0.2, seed 0); the other cells
    of analysis/cells/dynamics keep none (a positions.npz there costs 0.1 MB in every clone)."""
    kept = sorted(p.parent.name for p in (ROOT / "analysis/cells/dynamics").rglob("positions.npz"))
    assert kept == ["rnd_gossip__dynamics.mobility.speed=0.2-0.2-d48e34c1__seed0"]
