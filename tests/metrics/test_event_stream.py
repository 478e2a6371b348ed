"""events.jsonl streamed while a run goes: the same bytes as the in-memory log, nothing kept in memory,
events written only once every earlier one is complete, and nothing half-written when a run fails."""

from __future__ import annotations

import gc
import io
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

import p2pfl
import p2pfl.api
import p2pfl.metrics.rundir
import p2pfl.sim.kernel
from p2pfl.config import load_dict
from p2pfl.errors import ConfigError, UserError
from p2pfl.executors.process import ProcessExecutor
from p2pfl.metrics.recorder import Recorder, event_line
from p2pfl.sim.kernel import Simulation, SimulationStalled
from tests.helpers import digits_scenario

GOSSIP = digits_scenario({"name": "gossip", "rounds": 2, "eval_every": 1}, n=4)
FEDAVG = digits_scenario({"name": "fedavg", "rounds": 2, "eval_every": 1}, n=4, servers=True)


def _in_memory_lines(raw: dict[str, Any]) -> str:
    """The JSON lines of an in-memory run of ``raw`` (no sink: the log stays in ``recorder.events``)."""
    sim = Simulation(load_dict(raw))
    sim.run()
    assert sim.recorder.events, "an in-memory run keeps its events"
    return "".join(event_line(e) for e in sim.recorder.events)


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# --- 1. streamed == in memory ------------------------------------------------------------------


@pytest.mark.parametrize("raw", [GOSSIP, FEDAVG], ids=["gossip", "fedavg_server"])
@pytest.mark.slow
def test_streamed_events_are_byte_identical_to_the_in_memory_log(raw, tmp_path):
    result = p2pfl.run(raw, out=tmp_path / "run")
    streamed = (tmp_path / "run" / "events.jsonl").read_text(encoding="utf-8")
    assert streamed == _in_memory_lines(raw)
    events = [json.loads(line) for line in streamed.splitlines()]
    evals = [e for e in events if e["kind"] == "eval"]
    assert len(evals) >= 4 * 2  # eval_every: 1, every device scored each round
    assert all(isinstance(e["accuracy"], float) for e in evals)  # every score was filled in before writing
    assert {"send", "deliver", "compute", "round"} <= {e["kind"] for e in events}
    timing = json.loads((tmp_path / "run" / "timing.json").read_text(encoding="utf-8"))
    assert timing["events"] == result.timing["events"] == len(events)
    # every message takes at least a send and an arrival event of SimPy's; a rerun schedules the same ones
    sends = sum(e["kind"] == "send" for e in events)
    assert timing["sim_events"] >= 2 * sends > 0
    assert p2pfl.run(raw, write=False).timing["sim_events"] == timing["sim_events"]
    assert _leftovers(tmp_path) == ["run"]  # the temporary sibling was renamed, not copied


@pytest.mark.slow
def test_scores_computed_by_workers_are_streamed_in_order(tmp_path, monkeypatch):
    """With a process executor the scores come back after the simulation: the events recorded after a
    pending evaluation wait for it, and the file still matches the inline in-memory log byte for byte."""
    created: dict[int, int] = {}
    behind: list[int] = []
    later, fill = Recorder.evaluation_later, Recorder.fill_evaluation

    def evaluation_later(self, *args, **kwargs):
        entry = later(self, *args, **kwargs)
        created[id(entry)] = self.n_events
        return entry

    def fill_evaluation(self, entry, score):
        behind.append(self.n_events - created[id(entry)])  # events recorded while this score was pending
        fill(self, entry, score)

    monkeypatch.setattr(Recorder, "evaluation_later", evaluation_later)
    monkeypatch.setattr(Recorder, "fill_evaluation", fill_evaluation)
    path = tmp_path / "events.jsonl"
    workers = ProcessExecutor(1)
    try:
        sim = Simulation(load_dict(GOSSIP), executor=workers, events_path=path)
        sim.run()
    finally:
        workers.close()
    assert behind and max(behind) > 0  # the pending path was really taken
    monkeypatch.undo()
    assert path.read_text(encoding="utf-8") == _in_memory_lines({**GOSSIP, "executor": "inline"})


# --- 2. bounded memory ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_streaming_simulation_keeps_no_events_in_memory(tmp_path):
    path = tmp_path / "events.jsonl"
    held: list[int] = []
    sims: list[Simulation] = []
    sim = Simulation(load_dict(GOSSIP), events_path=path, on_round=lambda: held.append(len(sims[0].recorder.events)))
    sims.append(sim)
    summary = sim.run()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert held and set(held) == {0}  # nothing accumulated while the run went
    assert sim.recorder.events == []
    assert sim.recorder.n_events == len(lines) > 0
    assert len(sim.recorder.evaluations) == sum(json.loads(line)["kind"] == "eval" for line in lines) > 0
    # the summary (its score curve comes from ``evaluations``) does not depend on streaming
    assert json.dumps(summary) == json.dumps(Simulation(load_dict(GOSSIP)).run())


# --- 3. ordering around a pending evaluation -------------------------------------------------------


def test_a_pending_evaluation_holds_back_later_events_until_scored():
    sink = io.StringIO()
    rec = Recorder(2, sink=sink)
    rec.event(0.0, "first", node=0)
    entry = rec.evaluation_later(1.0, 1, 0)
    rec.event(2.0, "second", node=0)
    rec.round_done(3.0, 1, 0)
    assert sink.getvalue() == event_line({"t": 0.0, "kind": "first", "node": 0})
    assert rec.n_events == 4 and rec.events == []
    rec.fill_evaluation(entry, 0.5)
    lines = sink.getvalue().splitlines(keepends=True)
    assert [json.loads(line)["kind"] for line in lines] == ["first", "eval", "second", "round"]
    assert '"accuracy":0.5' in lines[1]
    assert lines[1] == event_line({"t": 1.0, "kind": "eval", "node": 1, "round": 0, "accuracy": 0.5})
    assert rec.scores == {1: 0.5} and rec.evaluations == [entry]
    rec.close()  # nothing pending: writes nothing more
    assert sink.getvalue() == "".join(lines)


def test_evaluations_scored_out_of_order_are_written_in_record_order():
    sink = io.StringIO()
    rec = Recorder(2, metric="rmse", sink=sink)
    a = rec.evaluation_later(0.0, 0, 1)
    b = rec.evaluation_later(0.0, 1, 1)
    rec.event(1.0, "after")
    rec.fill_evaluation(b, 2.0)
    assert sink.getvalue() == ""  # the first evaluation still holds everything back
    rec.fill_evaluation(a, 3.0)
    assert [(e["kind"], e.get("rmse")) for e in map(json.loads, sink.getvalue().splitlines())] == [
        ("eval", 3.0), ("eval", 2.0), ("after", None)]


def test_close_with_a_pending_evaluation_is_an_error():
    sink = io.StringIO()
    rec = Recorder(1, sink=sink)
    rec.evaluation_later(0.0, 0, 0)
    rec.event(1.0, "after")
    with pytest.raises(RuntimeError, match="1 evaluations still await"):
        rec.close()
    assert sink.getvalue() == ""  # nothing with a missing score was written


def test_without_a_sink_events_stay_in_memory_and_are_filled_in_place():
    rec = Recorder(1)
    entry = rec.evaluation_later(0.0, 0, 0)
    rec.event(1.0, "after")
    rec.fill_evaluation(entry, 0.25)
    rec.close()
    assert rec.events == [{"t": 0.0, "kind": "eval", "node": 0, "round": 0, "accuracy": 0.25},
                          {"t": 1.0, "kind": "after"}]
    assert rec.n_events == 2


# --- 4. nothing half-written ---------------------------------------------------------------------


def _stop_after(k: int, exc: BaseException, seen: list[list[str]], root: Path):
    calls = [0]

    def on_round() -> None:
        calls[0] += 1
        if calls[0] == k:
            seen.append(_leftovers(root))
            raise exc

    return on_round


@pytest.mark.parametrize("exc", [RuntimeError("boom mid-run"), KeyboardInterrupt()], ids=["error", "ctrl_c"])
@pytest.mark.slow
def test_a_run_stopped_mid_simulation_leaves_nothing(exc, tmp_path):
    seen: list[list[str]] = []
    with pytest.raises(type(exc)):
        p2pfl.run(GOSSIP, out=tmp_path / "run", on_round=_stop_after(3, exc, seen, tmp_path))
    # the run was streaming into its temporary sibling when it stopped ...
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith(".run.tmp-")
    # ... which is gone now, and no run directory was made
    assert _leftovers(tmp_path) == []


def test_a_protocol_failing_mid_simulation_leaves_nothing(tmp_path, monkeypatch):
    from p2pfl.registry import get_protocol

    cls = get_protocol("gossip").implementation(load_dict(GOSSIP).protocol)
    device = cls.device
    started: list[list[str]] = []

    def failing_device(self, ctx):
        yield from device(self, ctx)  # a whole device run, then it fails
        started.append(_leftovers(tmp_path))
        raise RuntimeError("protocol bug")

    monkeypatch.setattr(cls, "device", failing_device)
    with pytest.raises(RuntimeError, match="protocol bug"):
        p2pfl.run(GOSSIP, out=tmp_path / "run")
    assert started and started[0][0].startswith(".run.tmp-")
    assert _leftovers(tmp_path) == []


def test_a_stalled_simulation_leaves_nothing(tmp_path):
    raw = digits_scenario({"name": "fedavg", "rounds": 3}, n=4, servers=True)
    raw["topology"]["servers"][0]["link"]["loss"] = 0.9  # updates lost, no round_timeout_s: the server waits forever
    with pytest.raises(SimulationStalled, match="stalled"):
        p2pfl.run(raw, out=tmp_path / "run")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["summary", "manifest", "write"])
@pytest.mark.slow
def test_a_failure_after_the_simulation_leaves_nothing(where, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError(f"{where} failed")

    if where == "summary":  # after the simulation ran (events all streamed), before anything else is written
        monkeypatch.setattr(Simulation, "summary", boom)
    elif where == "manifest":  # while the run directory's contents are gathered
        monkeypatch.setattr(p2pfl.api, "manifest", boom)
    else:  # inside write_run_dir, after events.jsonl and scenario.yaml are in the temporary directory
        monkeypatch.setattr(p2pfl.metrics.rundir, "dumps_json", boom)
    with pytest.raises(RuntimeError, match=f"{where} failed"):
        p2pfl.run(GOSSIP, out=tmp_path / "run")
    assert _leftovers(tmp_path) == []


def test_a_simulation_that_cannot_be_built_leaves_nothing(tmp_path):
    raw = digits_scenario({"name": "fedavg", "rounds": 1}, n=4)  # fedavg without a server
    with pytest.raises(ConfigError, match="needs a server"):
        p2pfl.run(raw, out=tmp_path / "run")
    assert _leftovers(tmp_path) == []


def test_a_simulation_that_cannot_be_built_closes_its_event_stream(tmp_path):
    raw = digits_scenario({"name": "fedavg", "rounds": 1}, n=4)  # fedavg without a server
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(ConfigError, match="needs a server"):
            Simulation(load_dict(raw), events_path=tmp_path / "events.jsonl")
        gc.collect()  # the half-built Simulation is gone: an open file would warn now
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not [m for m in unclosed if "events.jsonl" in m]


# --- 5. an existing out directory ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_an_existing_out_is_refused_before_anything_runs(kind, tmp_path, monkeypatch):
    out = tmp_path / "run"
    if kind == "dir":
        out.mkdir()
        (out / "keep.txt").write_text("mine", encoding="utf-8")
    else:
        out.write_text("mine", encoding="utf-8")

    def no_simulation(*args, **kwargs):
        raise AssertionError("a simulation was built")

    monkeypatch.setattr(p2pfl.sim.kernel, "Simulation", no_simulation)
    with pytest.raises(UserError, match=re.escape(str(out))) as err:
        p2pfl.run(GOSSIP, out=out)
    assert "already exists" in str(err.value)
    assert _leftovers(tmp_path) == ["run"]  # no temporary sibling either
    if kind == "dir":
        assert _leftovers(out) == ["keep.txt"] and (out / "keep.txt").read_text(encoding="utf-8") == "mine"
    else:
        assert out.read_text(encoding="utf-8") == "mine"


def test_the_score_curve_says_the_bytes_sent_up_to_each_point():
    """Each point's bytes are those of the send events logged before that round's last evaluation."""
    from p2pfl.api import resolve
    from p2pfl.sim.kernel import Simulation
    from tests.helpers import digits_scenario

    sc = digits_scenario({"name": "fedavg", "rounds": 3, "eval_every": 1}, n=4, servers=True)
    sim = Simulation(resolve(sc))
    summary = sim.run()
    events = sim.recorder.events
    last_eval = {e["round"]: i for i, e in enumerate(events) if e["kind"] == "eval"}
    curve = summary["accuracy_curve"]
    assert [p["round"] for p in curve] == [1, 2, 3]
    for p in curve:
        before = [e for e in events[: last_eval[p["round"]]] if e["kind"] == "send"]
        assert p["bytes_per_device"] == sum(e["bytes"] for e in before if e["src"] < 4) / 4
        assert p["bytes_servers"] == sum(e["bytes"] for e in before if e["src"] >= 4)
    assert 0 < curve[0]["bytes_servers"] < curve[-1]["bytes_servers"] <= summary["bytes_per_server"]["server"]


@pytest.mark.slow
def test_events_without_messages_drop_only_the_message_lines(tmp_path):
    """``events: no_messages`` writes every other event in the same order and the same summary."""
    full = tmp_path / "full"
    lean = tmp_path / "lean"
    p2pfl.run(GOSSIP, out=full)
    p2pfl.run({**GOSSIP, "events": "no_messages"}, out=lean)
    assert (lean / "summary.json").read_bytes() == (full / "summary.json").read_bytes()
    kept = [line for line in (full / "events.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] not in ("send", "deliver", "drop")]
    lines = (lean / "events.jsonl").read_text().splitlines()
    assert lines == kept and len(kept) < len((full / "events.jsonl").read_text().splitlines())
    assert json.loads((lean / "timing.json").read_text())["events"] == len(kept)
