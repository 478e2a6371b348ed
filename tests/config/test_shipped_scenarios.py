"""Every YAML file under scenarios/ is a valid scenario (``extends`` resolved), and the
server-vs-serverless analysis loads its runs from those files.

``p2pfl.config.load`` checks every file (no data loaded); ``python -m p2pfl validate`` (which
also builds topology, data and protocol) runs on a few. scenarios/studies/ holds study files
(sweeps over scenarios), not scenarios: skipped.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from p2pfl.config import load
from p2pfl.registry import get_protocol
from tests.helpers import analysis_module

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
FILES = sorted(p for p in SCENARIOS.glob("**/*.yaml") if p.relative_to(SCENARIOS).parts[0] != "studies")
FMNIST = Path("/usr/share/datasets/fashion-mnist")
#: validated by the command, in a subprocess (the others by load only: data and MuJoCo cost time)
BY_COMMAND = ["quickstart.yaml", "conditional/mcdc_synthetic.yaml", "server_vs_serverless/base.yaml",
              "server_vs_serverless/gossip.yaml", "server_vs_serverless/fedavg.yaml"]


def _id(path: Path) -> str:
    return str(path.relative_to(SCENARIOS))


def test_the_glob_finds_the_shipped_scenarios() -> None:
    names = {_id(p) for p in FILES}
    assert len(FILES) >= 20
    assert {"quickstart.yaml", "server_vs_serverless/base.yaml", "server_vs_serverless/rnd.yaml"} <= names
    assert set(BY_COMMAND) <= names


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_every_scenario_file_loads(path: Path) -> None:
    sc = load(path)
    assert sc.topology is not None and sc.protocol.name


@pytest.mark.parametrize("name", BY_COMMAND)
def test_p2pfl_validate_accepts(name: str) -> None:
    path = SCENARIOS / name
    if load(path).data.dataset == "fashion_mnist" and not (FMNIST / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("apt-get install dataset-fashion-mnist")
    proc = subprocess.run([sys.executable, "-m", "p2pfl", "validate", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"{path}: ok (")


# --- the server-vs-serverless files and the analysis that runs them ----------------------------
def test_each_protocol_file_extends_the_common_base() -> None:
    svs = analysis_module("server_vs_serverless")
    base = load(SCENARIOS / "server_vs_serverless" / "base.yaml")
    for label, (name, fname) in svs.PROTOCOL_FILES.items():
        raw = yaml.safe_load((SCENARIOS / "server_vs_serverless" / fname).read_text(encoding="utf-8"))
        assert raw["extends"] == "base.yaml", label
        sc = load(SCENARIOS / "server_vs_serverless" / fname)
        assert sc.protocol.name == name
        assert (sc.data, sc.model, sc.training, sc.devices) == (base.data, base.model, base.training, base.devices)
        assert sc.topology.model_copy(update={"servers": []}) == base.topology
        assert bool(sc.topology.servers) == get_protocol(name).needs_server, label


def test_the_study_runs_every_protocol_file_over_n_partitions_and_seeds() -> None:
    from p2pfl.config.study import load_study

    svs = analysis_module("server_vs_serverless")
    study = load_study(SCENARIOS / "studies" / "server_vs_serverless.yaml")
    assert {c.variant for c in study.cells} == set(svs.PROTOCOL_FILES)
    assert len(study.cells) == len(svs.PROTOCOL_FILES) * 2 * 3 * 3
    for c in study.cells:
        name, fname = svs.PROTOCOL_FILES[c.variant]
        sc = c.scenario
        assert c.flags[0].startswith("(base ") and c.flags[0].endswith(f"server_vs_serverless/{fname})")
        assert sc.protocol.name == name and sc.protocol.rounds == 8 and sc.topology.seed is None
        assert sc.topology.radius == svs.radius_for(sc.topology.n)
        assert svs.partition_name(c.grid["data.partition"]) in svs.PARTITIONS
    # the base's own N is what the study gives N = 12
    assert load(SCENARIOS / "server_vs_serverless" / "base.yaml").topology.radius == svs.radius_for(12)


STUDY_FILES = sorted((SCENARIOS / "studies").glob("**/*.yaml"))


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: str(p.relative_to(SCENARIOS / "studies")))
def test_every_study_file_loads_and_validates_every_cell(path: Path) -> None:
    from p2pfl.config.study import load_study

    study = load_study(path)
    assert study.cells and len({c.id for c in study.cells}) == len(study.cells)
