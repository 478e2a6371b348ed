"""Bad input: exit status 2, one line naming the file, the field and the fix; no traceback, no run directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from p2pfl.cli import main
from tests.helpers import digits_scenario

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _gossip():
    return digits_scenario({"name": "gossip", "rounds": 1})


def _with(**changes):
    sc = _gossip()
    for dotted, value in changes.items():
        node = sc
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return sc


CASES = {
    "unknown key": (_with(training__epoch=3), r"bad\.yaml: unknown field 'training\.epoch'; remove it"),
    "wrong type": (_with(training__lr="fast"), r"bad\.yaml: field 'training\.lr': .*got 'fast'"),
    "unknown protocol": (_with(protocol={"name": "gosip"}), r"field 'protocol\.name': unknown protocol 'gosip'; choose one of: .*gossip"),
    "bad protocol param": (_with(protocol={"name": "gossip", "mode": "sometimes"}), r"field 'protocol\.mode'"),
    "missing topology file": (_with(topology="nope/missing.yaml"), r"field 'topology': topology file 'nope/missing\.yaml' not found"),
    "disconnected graph": (_with(topology={"kind": "erdos_renyi", "n": 6, "p": 0.0, "tries": 2}),
                           r"disconnected.*allow_disconnected"),
    "missing dataset": (_with(data={"dataset": "fashion_mnist", "root": "/nonexistent/fm"}),
                        r"train-images-idx3-ubyte"),
    "invalid yaml": ("name: [unclosed\n", r"bad\.yaml: invalid YAML at line"),
    "server protocol without server": (_with(protocol={"name": "fedavg"}), r"protocol 'fedavg' needs a server"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_error_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, case):
    data, pattern = CASES[case]
    path = _write(tmp_path, data)
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("p2pfl: error: ")
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    import re

    assert re.search(pattern, err), err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_validate_catches_the_same_errors_without_running(tmp_path, capsys):
    path = _write(tmp_path, CASES["disconnected graph"][0])
    assert main(["validate", str(path)]) == 2
    ok = _write(tmp_path, _gossip())
    assert main(["validate", str(ok)]) == 0
    assert "ok (gossip, 6 devices" in capsys.readouterr().out


def test_set_overrides_and_seed_on_the_command_line(tmp_path, capsys):
    path = _write(tmp_path, _gossip())
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--seed", "7",
                 "--set", "protocol.rounds=2", "--set", "protocol.exchange=push"]) == 0
    resolved = yaml.safe_load((tmp_path / "r" / "scenario.yaml").read_text())
    assert resolved["seed"] == 7
    assert resolved["protocol"]["rounds"] == 2 and resolved["protocol"]["exchange"] == "push"
    assert main(["run", str(path), "--out", str(tmp_path / "r2"), "--set", "protocol.rounds=zero"]) == 2
    assert "field 'protocol.rounds'" in capsys.readouterr().err


def test_existing_output_directory_is_refused(tmp_path, capsys):
    path = _write(tmp_path, _gossip())
    (tmp_path / "r").mkdir()
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_python_dash_m_entry_point_exits_2_on_bad_input(tmp_path):
    path = _write(tmp_path, CASES["unknown protocol"][0])
    proc = subprocess.run([sys.executable, "-m", "p2pfl", "validate", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert "unknown protocol 'gosip'" in proc.stderr and "Traceback" not in proc.stderr
