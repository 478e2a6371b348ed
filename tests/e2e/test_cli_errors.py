"""Bad input: exit status 2, one line naming the file, the field and the fix; no traceback, no run directory."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from p2pfl.cli import main
from tests.helpers import Lines, digits_scenario, interruptible

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
    "even smoothing box": (_with(data={"dataset": "digits", "partition": {"kind": "feature_skew", "mode":
                                                                          "smoothed_pattern", "smooth": 4}}),
                           r"field 'data\.partition\.smooth': smooth must be odd .*; got 4"),
    "gap criterion without its threshold": (_with(protocol={"name": "rnd_gossip", "criterion": "gap"}),
                                            r"criterion: gap needs protocol\.gap"),
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
    assert re.search(pattern, err), err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_validate_catches_the_same_errors_without_running(tmp_path, capsys):
    path = _write(tmp_path, CASES["disconnected graph"][0])
    assert main(["validate", str(path)]) == 2
    ok = _write(tmp_path, _gossip())
    assert main(["validate", str(ok)]) == 0
    assert "ok (gossip, 6 devices" in capsys.readouterr().out


@pytest.mark.e2e
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


@pytest.mark.slow
@pytest.mark.e2e
def test_python_dash_m_entry_point_exits_2_on_bad_input(tmp_path):
    """The one end-to-end check of the entry point on bad input; every other case calls ``main`` in-process."""
    path = _write(tmp_path, CASES["unknown protocol"][0])
    proc = subprocess.run([sys.executable, "-m", "p2pfl", "validate", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"p2pfl: error: {path}: field 'protocol.name': unknown protocol 'gosip'; choose one of: ")
    assert "gossip, " in line.split("choose one of: ", 1)[1] and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


# --- the command line as a user types it: relative paths in a working directory ------------------
#
# Each case: exit status 2, exactly one line on stderr naming the file (and the field) with a fix,
# no traceback, nothing written in the working directory (no runs/, no --out).


def _gossip_yaml(**changes) -> str:
    return yaml.safe_dump(_with(**changes))


#: name -> (files to write {name: text | bytes | None (a folder)}, argv after `p2pfl`, what stderr must contain)
CLI_CASES = {
    "binary scenario": ({"sc.bin": bytes(range(256)) * 8}, ["run", "sc.bin"], ["sc.bin: binary data"]),
    "png scenario": ({"sc.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(32)}, ["validate", "sc.png"],
                     ["sc.png: binary data"]),
    "empty scenario": ({"sc.yaml": ""}, ["run", "sc.yaml", "--out", "out"],
                       ["sc.yaml: the file is empty", "needs at least 'topology' and 'protocol'"]),
    "directory scenario": ({"folder": None}, ["run", "folder"], ["folder: is a directory"]),
    "list scenario": ({"sc.yaml": "- 1\n- 2\n"}, ["validate", "sc.yaml"], ["sc.yaml: expected a mapping of scenario fields"]),
    "binary topology file": ({"t.bin": bytes(range(256)), "sc.yaml": _gossip_yaml(topology="t.bin")},
                             ["run", "sc.yaml"], ["t.bin: binary data"]),
    "ring of 10^12 devices": ({"sc.yaml": _gossip_yaml(topology={"kind": "ring", "n": 10**12})}, ["run", "sc.yaml"],
                              ["sc.yaml: field 'topology.n': at most 1,000,000 devices", "use a smaller n"]),
    "huge hidden size": ({"sc.yaml": _gossip_yaml(model__hidden=10**12)}, ["validate", "sc.yaml"],
                         ["sc.yaml: field 'model.hidden'", "use a value <= "]),
    "protocol name list": ({"sc.yaml": _gossip_yaml(protocol={"name": ["gossip"]})}, ["run", "sc.yaml", "--out", "out"],
                           ["sc.yaml: field 'protocol.name': expected a protocol name (a string)"]),
    "protocol number": ({"sc.yaml": _gossip_yaml(protocol=5)}, ["validate", "sc.yaml"],
                        ["sc.yaml: field 'protocol': expected a mapping"]),
    "nan lr": ({"sc.yaml": _gossip_yaml().replace("lr: 0.05", "lr: .nan")}, ["run", "sc.yaml"],
               ["sc.yaml: field 'training.lr': Input should be a finite number; got nan"]),
    "inf latency via --set": ({"sc.yaml": _gossip_yaml()}, ["validate", "sc.yaml", "--set", "topology.link.latency_s=.inf"],
                              ["sc.yaml: field 'topology.link.latency_s': Input should be a finite number"]),
    "leftover protocol keys": ({"sc.yaml": _gossip_yaml(protocol={"name": "gossip", "rounds": 1, "mode": "sync"})},
                               ["run", "sc.yaml", "--set", "protocol.name=local"],
                               ["sc.yaml: field 'protocol': protocol 'local' has no parameter 'mode'",
                                "remove it with --unset protocol.mode"]),
    "unset typo": ({"sc.yaml": _gossip_yaml()}, ["run", "sc.yaml", "--unset", "protocol.rouns"],
                   ["sc.yaml: --unset protocol.rouns: the scenario has no key"]),
    "set topology to a folder": ({"sc.yaml": _gossip_yaml(), "folder": None}, ["validate", "sc.yaml", "--set", "topology=folder"],
                                 ["sc.yaml: field 'topology': 'folder' is a directory"]),
}


def _write_files(cwd: Path, files: dict[str, str | bytes | None]) -> None:
    for fname, content in files.items():
        if content is None:
            (cwd / fname).mkdir()
        elif isinstance(content, bytes):
            (cwd / fname).write_bytes(content)
        else:
            (cwd / fname).write_text(content)


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, case):
    """In-process through ``main``: what the console script runs (the real entry point is tested once below)."""
    files, argv, patterns = CLI_CASES[case]
    _write_files(tmp_path, files)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("p2pfl: error: ")
    for pattern in patterns:
        assert pattern in lines[0], lines[0]
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "something was written"


def test_a_bad_command_line_is_argparses_usage_and_status_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["runn", "x.yaml"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'runn'" in err and err.startswith("usage: p2pfl")


def test_set_topology_file_and_unset_on_the_command_line(tmp_path, capsys):
    (tmp_path / "t5.yaml").write_text("kind: ring\nn: 5\n")
    path = _write(tmp_path, _with(protocol={"name": "gossip", "rounds": 1, "mode": "sync"}))
    assert main(["validate", str(path), "--set", "topology=t5.yaml"]) == 0
    assert "ok (gossip, 5 devices" in capsys.readouterr().out
    assert main(["validate", str(path), "--set", "protocol.name=local", "--unset", "protocol.mode"]) == 0
    assert "ok (local, 6 devices" in capsys.readouterr().out
    assert main(["validate", str(path), "--set", "protocol.name=local", "--set", "protocol.mode=~"]) == 0
    assert main(["validate", str(path), "--set", "protocol.name=local"]) == 2
    assert "--unset protocol.mode" in capsys.readouterr().err


# --- Ctrl-C -------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_ctrl_c_during_a_run_exits_130_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "p2pfl", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                             "--set", "protocol.rounds=100000", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=interruptible)
    try:
        stdout = Lines(proc.stdout)
        stdout.wait_for(lambda line: line.startswith("simulating "))  # built, into the first of 100,000 rounds
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)  # a guard: it exits within about a second on a quiet machine
        stderr = proc.stderr.read() if proc.stderr else ""
        text = stdout.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["p2pfl: interrupted; no run directory written"], stderr
    assert "Traceback" not in stderr + text
    assert list(tmp_path.iterdir()) == []  # no run directory, no temporary sibling, no runs/


def test_ctrl_c_while_writing_the_run_directory_leaves_nothing(tmp_path):
    from p2pfl.metrics.rundir import write_run_dir

    def events():
        yield {"t": 0.0}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_run_dir(tmp_path / "run", scenario={"name": "x"}, summary={}, events=events(), timing={},
                      manifest={})
    assert list(tmp_path.iterdir()) == []
