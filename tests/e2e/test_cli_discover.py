"""Discoverability: ``p2pfl list protocols NAME`` (parameters) and ``p2pfl list datasets`` (availability),
through the command's ``main`` in-process (stdout and stderr captured; the entry point itself is tested in
test_cli_errors)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from p2pfl.cli import main

ROOT = Path(__file__).resolve().parents[2]
FMNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def p2pfl_cmd(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``p2pfl ARGS...`` run by ``main`` in the repository root: (exit status, stdout, stderr)."""
    monkeypatch.chdir(ROOT)

    def run(*args: str) -> Done:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return run


def _table(stdout: str) -> dict[str, list[str]]:
    """Parameter rows of ``list protocols NAME`` by name: [type, default, description...] split on 2+ spaces."""
    import re

    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["name", "type"])
    return {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[start + 1:])}


def test_list_protocols_name_prints_every_parameter_with_type_default_and_description(p2pfl_cmd) -> None:
    proc = p2pfl_cmd("list", "protocols", "gossip")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("gossip: serverless randomized gossip")  # the summary line
    assert "needs a server: no" in lines
    assert "runs under dynamics: yes" in lines
    rows = _table(proc.stdout)
    # inherited fields first, then the protocol's own
    assert list(rows)[:2] == ["rounds", "eval_every"]
    assert rows["rounds"][:2] == ["int", "10"] and ">= 1" in rows["rounds"][2]
    assert rows["eval_every"][:2] == ["int | null", "null"] and "evaluate every k rounds" in rows["eval_every"][2]
    assert rows["exchange"][:2] == ["push_pull | push", "push_pull"]
    assert rows["wake_rate_hz"][:2] == ["float", "1.0"] and "Poisson" in rows["wake_rate_hz"][2]
    assert "name" not in rows  # the protocol's own name is not a parameter to set


def test_list_protocols_name_says_when_a_server_is_needed(p2pfl_cmd) -> None:
    fedprox = p2pfl_cmd("list", "protocols", "fedprox")
    assert fedprox.returncode == 0
    assert "needs a server: yes" in fedprox.stdout
    rows = _table(fedprox.stdout)
    assert {"rounds", "eval_every", "client_fraction", "round_timeout_s", "mu"} <= set(rows)  # FedAvg's inherited
    assert rows["mu"][:2] == ["float", "0.01"]
    feddrman = _table(p2pfl_cmd("list", "protocols", "feddrman").stdout)
    assert feddrman["lambda_sub"][:2] == ["dict[str, float]", "{agent: 0.03, gripper: 0.03, joint: 0.03, text: 0.03, wrist: 0.03}"]
    assert feddrman["omega"][1] == "temporal."
    conditional = p2pfl_cmd("list", "protocols", "conditional").stdout
    assert "needs a server: yes for some settings" in conditional


def test_list_protocols_unknown_name_is_one_line_listing_the_valid_ones(p2pfl_cmd) -> None:
    proc = p2pfl_cmd("list", "protocols", "gosip")
    assert proc.returncode == 2 and proc.stdout == ""
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("p2pfl: error: unknown protocol 'gosip'; valid: ")
    for name in ("gossip", "fedavg", "rnd_gossip", "dac"):
        assert name in err
    other = p2pfl_cmd("list", "datasets", "digits")
    assert other.returncode == 2 and "only 'p2pfl list protocols NAME'" in other.stderr


def test_list_datasets_says_what_is_available_here(p2pfl_cmd) -> None:
    proc = p2pfl_cmd("list", "datasets")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in proc.stdout.splitlines()}
    assert rows["digits"][0] == "yes" and "bundled with scikit-learn" in rows["digits"][1]
    assert rows["synthetic_linear"][0] == "yes" and "generated from the seed" in rows["synthetic_linear"][1]
    fmnist = rows["fashion_mnist"]
    if (FMNIST / "train-images-idx3-ubyte.gz").exists():
        assert fmnist[0] == "yes" and str(FMNIST) in fmnist[1]
    else:
        assert fmnist[0] == "no" and "apt-get install dataset-fashion-mnist" in fmnist[1]
    for name in ("mnist", "cifar10", "cifar100"):
        assert rows[name][0] in ("yes", "no")
        if rows[name][0] == "no":
            assert "data.root" in rows[name][1] and "data.download: true" in rows[name][1]
    assert rows["robotics"][0] in ("yes", "no")


@pytest.mark.parametrize("what", ["datasets", "protocols", "partitions", "topologies"])
def test_list_without_a_name_keeps_one_line_per_entry(p2pfl_cmd, what: str) -> None:
    proc = p2pfl_cmd("list", what)
    assert proc.returncode == 0 and proc.stdout.strip()
    assert all(line and not line[0].isspace() for line in proc.stdout.splitlines())
