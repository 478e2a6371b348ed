"""Every YAML file under scenarios/ is a valid scenario (``extends`` resolved), and the headline
comparison's files (scenarios/headline/, scenarios/studies/headline_n*.yaml) share one fleet.

``p2pfl.config.load`` checks every file (no data loaded); ``p2pfl validate`` (which also builds
topology, data and protocol; through ``main`` in-process) runs on a few. scenarios/studies/ holds
study files (sweeps over scenarios), not scenarios: skipped. Each study file is loaded (every
cell validated, about 500 for the headline studies) once per session.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from p2pfl.cli import main
from p2pfl.config import load
from p2pfl.registry import get_protocol
from p2pfl.study.spec import Study, load_study

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
FILES = sorted(p for p in SCENARIOS.glob("**/*.yaml") if p.relative_to(SCENARIOS).parts[0] != "studies")
FMNIST = Path("/usr/share/datasets/fashion-mnist")
#: validated by the command (the others by load only: data and MuJoCo cost time)
BY_COMMAND = ["quickstart.yaml", "conditional/mcdc_synthetic.yaml", "headline/base.yaml", "headline/gossip.yaml",
              "headline/fedavg.yaml"]


def _id(path: Path) -> str:
    return str(path.relative_to(SCENARIOS))


def test_the_glob_finds_the_shipped_scenarios() -> None:
    names = {_id(p) for p in FILES}
    assert len(FILES) >= 20
    assert {"quickstart.yaml", "headline/base.yaml", "headline/rnd_relay.yaml"} <= names
    assert set(BY_COMMAND) <= names
    assert BIG_STUDIES.issubset(p.name for p in STUDY_FILES)  # the slow marks name existing studies


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_every_scenario_file_loads(path: Path) -> None:
    sc = load(path)
    assert sc.topology is not None and sc.protocol.name


@functools.cache
def _study(path: Path) -> Study:
    """A study file loaded once per session (loading validates every cell)."""
    return load_study(path)


@pytest.mark.parametrize("name", BY_COMMAND)
@pytest.mark.slow
def test_p2pfl_validate_accepts(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = SCENARIOS / name
    if load(path).data.dataset == "fashion_mnist" and not (FMNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("apt-get install dataset-fashion-mnist")
    monkeypatch.chdir(ROOT)
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip().startswith(f"{path}: ok (")


# --- the headline comparison's files ------------------------------------------------------------
HEADLINE = SCENARIOS / "headline"
#: protocol file -> the protocol it runs (the study variant of the same name)
HEADLINE_FILES = {"local": "local", "fedavg": "fedavg", "oracle": "oracle", "ifca": "ifca", "rnd_relay": "rnd",
                  "rnd_direct": "rnd", "rnd_gossip_h1": "rnd_gossip", "rnd_gossip_h2": "rnd_gossip",
                  "dac_cosine": "dac", "dac_original": "dac", "gossip": "gossip", "dsgd": "dsgd"}


def _radius(n: int) -> float:
    """Mean degree about 7: 1.1 sqrt(7 / (pi (N - 1))), to 3 significant digits (scenarios/headline/base.yaml)."""
    return float(f"{1.1 * (7 / (3.141592653589793 * (n - 1))) ** 0.5:.3g}")


def test_each_headline_protocol_file_extends_the_common_fleet() -> None:
    base = load(HEADLINE / "base.yaml")
    # centralized: the pilot's ceiling (scenarios/studies/headline_pilot.yaml), not a contender
    assert sorted(p.stem for p in HEADLINE.glob("*.yaml")) == sorted([*HEADLINE_FILES, "base", "centralized"])
    for stem, name in {**HEADLINE_FILES, "centralized": "centralized"}.items():
        assert yaml.safe_load((HEADLINE / f"{stem}.yaml").read_text(encoding="utf-8"))["extends"] == "base.yaml"
        sc = load(HEADLINE / f"{stem}.yaml")
        assert sc.protocol.name == name, stem
        assert (sc.data, sc.model, sc.training, sc.devices, sc.dynamics) == (
            base.data, base.model, base.training, base.devices, base.dynamics), stem
        assert sc.topology.model_copy(update={"servers": []}) == base.topology, stem
        assert bool(sc.topology.servers) == get_protocol(name).needs_server, stem
    assert base.topology.radius == _radius(base.topology.n)


SERVER_1G = {"fedavg_1g": "fedavg", "ifca_1g": "ifca", "rnd_relay_1g": "rnd_relay"}
#: models a serverless protocol sends per device and round in a static fleet (the study headers' calibration)
MODELS_PER_ROUND = {"gossip": 2.0, "rnd_gossip_h1": 2.0, "rnd_gossip_h2": 2.0, "dsgd": 6.8, "dac_cosine": 6.8,
                    "dac_original": 3.0}


@pytest.mark.parametrize(("n", "cells", "protocols", "seeds"), [
    # server protocols and Local: static and churn; the rest also under group mobility
    pytest.param(100, 9 * 4 * 2 * 5 + 6 * 4 * 3 * 5, set(HEADLINE_FILES) | set(SERVER_1G), 5, marks=pytest.mark.slow),
    pytest.param(1000, 14 * 2 * 2 * 3, set(HEADLINE_FILES) - {"rnd_direct"} | set(SERVER_1G), 3, marks=pytest.mark.slow),
    (10000, 10 * 2 * 3, {"local", "fedavg", "fedavg_1g", "oracle", "ifca", "ifca_1g", "gossip", "dsgd",
                         "dac_original", "rnd_gossip_h1"}, 3),
])
def test_each_headline_study_runs_its_protocols_at_the_pilots_budget(n: int, cells: int, protocols: set[str],
                                                                      seeds: int) -> None:
    study = _study(SCENARIOS / "studies" / f"headline_n{n}.yaml")  # loaded once for this test and the next
    assert len(study.cells) == cells and {c.variant for c in study.cells} == protocols
    assert {c.seed for c in study.cells} == set(range(seeds))
    budget = {c.scenario.protocol.rounds for c in study.cells if c.scenario.topology.servers}
    assert len(budget) == 1
    r = budget.pop()
    for c in study.cells:
        stem = SERVER_1G.get(c.variant, c.variant)
        assert c.flags[0].startswith("(base ") and c.flags[0].endswith(f"headline/{stem}.yaml)")
        sc = c.scenario
        assert sc.protocol.name == HEADLINE_FILES[stem]
        assert sc.topology.n == n and sc.topology.radius == _radius(n) and sc.topology.ingress == "serialized"
        assert sc.data.test_samples_per_client == 100
        if sc.topology.servers:  # the deadline covers a serialized broadcast and the serialized uploads
            assert sc.dynamics is not None and sc.dynamics.mobility is None, c.id  # their static cells are reused
            egress = sc.topology.servers[0].egress_bps or 5.0e7
            per_device = 101_800 * 8 / 5.0e7 * ((4 if stem == "ifca" else 1) + 1) * (5.0e7 / egress)
            assert sc.protocol.round_timeout_s > n * per_device, c.id
        if stem in MODELS_PER_ROUND:  # serverless: IFCA's traffic (5 models per round) over R rounds, or 4R
            assert sc.protocol.rounds == min(4 * r, int(5 * r / MODELS_PER_ROUND[stem])), c.id
        elif stem == "ifca":
            assert sc.protocol.balanced_init


STUDY_FILES = sorted((SCENARIOS / "studies").glob("**/*.yaml"))
#: studies of more than about 100 cells: loading validates every cell (seconds)
BIG_STUDIES = {"headline_n100.yaml", "headline_n1000.yaml", "headline_pilot.yaml", "rnd_recovery.yaml"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name in BIG_STUDIES else p
                                  for p in STUDY_FILES], ids=lambda p: str(p.relative_to(SCENARIOS / "studies")))
@pytest.mark.slow
def test_every_study_file_loads_and_validates_every_cell(path: Path) -> None:
    study = _study(path)
    assert study.cells and len({c.id for c in study.cells}) == len(study.cells)
