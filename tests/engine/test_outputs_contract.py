"""The outputs contract, parametrized over both engines: each of the tensor engine's six programs writes the event
kernel's summary fields (one builder, ``p2pfl.metrics.summary.build_summary``), save those declared engine-only
here; and the four ways the tensor engine's summary had drifted from the kernel's (issue 68), each held."""

from __future__ import annotations

import contextlib
from functools import cache
from typing import Any

import pytest

from p2pfl import api
from p2pfl.metrics.rundir import dumps_json
from p2pfl.registry import get_protocol
from p2pfl.sim.kernel import Simulation
from p2pfl.tensor.program import RoundProgram
from p2pfl.tensor.simulation import TensorSimulation, program_of
from tests.engine.programs import BASE, PROGRAM_SETS, declared_programs, overrides

#: summary fields one engine writes and the other does not, and why
ENGINE_ONLY: dict[str, set[str]] = {
    "events": set(),
    "tensor": {"engine"},  # which engine ran (a kernel summary without it is the kernel's: archived runs read so)
}
#: logs one engine writes for a protocol and the other does not: the tensor engine's DSGD logs the consensus
#: distance its rows give at no cost; the kernel's DSGD does not compute it (N models stacked a round)
ENGINE_ONLY_LOGS: dict[tuple[str, str], set[str]] = {("tensor", "dsgd"): {"consensus_distance"}}



@pytest.fixture(autouse=True)
def no_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's collector settings change no result (``few_collections``, tested in tests/sim); its full
    collection at a run's start costs a test process more than these runs do."""
    monkeypatch.setattr("p2pfl.sim.kernel.few_collections", contextlib.nullcontext)

@cache
def summary(program: str, engine: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    sets, unset = overrides(program, engine, extra)
    return api.run(BASE, overrides=sets, unset=unset, write=False).summary


def test_every_tensor_program_is_in_the_contract() -> None:
    """Every protocol that names a tensor program runs in this contract and the agreement tests
    (``tests/engine/programs.py``), and every entry there is a protocol with a program."""
    declared = declared_programs()
    assert set(PROGRAM_SETS) == set(declared)
    for name, targets in declared.items():
        for target in targets:  # each beside its protocol: <package>/<name>_tensor.py
            module = target.partition(":")[0]
            assert module.endswith("_tensor") and module.startswith(get_protocol(name).__module__.rpartition(".")[0])
        sets, unset = overrides(name, "tensor")
        program = program_of(api.resolve(BASE, overrides=sets, unset=unset).protocol)
        assert issubclass(program, RoundProgram) and f"{program.__module__}:{program.__name__}" in targets


@pytest.mark.parametrize("engine", ["events", "tensor"])
@pytest.mark.parametrize("program", sorted(PROGRAM_SETS))
def test_each_engine_writes_the_other_engines_fields(program: str, engine: str) -> None:
    other = "tensor" if engine == "events" else "events"
    mine, theirs = summary(program, engine), summary(program, other)
    assert set(mine) - ENGINE_ONLY[engine] == set(theirs) - ENGINE_ONLY[other]
    assert ENGINE_ONLY[engine] <= set(mine)  # a declared field that is no longer written leaves the list
    for key in ("round_latency_s", "energy", "bytes_per_server"):
        assert set(mine[key]) == set(theirs[key]), key
    logs = set(mine["logs"]) - ENGINE_ONLY_LOGS.get((engine, program), set())
    assert logs == set(theirs["logs"]) - ENGINE_ONLY_LOGS.get((other, program), set())
    assert dumps_json(mine)  # JSON as written: no NaN anywhere


def test_a_tensor_run_times_its_rounds_in_round_latency_s() -> None:
    """Drift (a): the tensor summary carried ``round_latency``, so every report reading ``round_latency_s.p50``
    got None for it."""
    te, ev = summary("dsgd", "tensor"), summary("dsgd", "events")
    assert "round_latency" not in te
    assert te["round_latency_s"]["rounds_of"] == "fleet" and te["round_latency_s"]["n"] == 2
    assert te["round_latency_s"]["max"] == pytest.approx(te["sim_time_s"] / 2, rel=0.5)
    assert set(te["round_latency_s"]) == set(ev["round_latency_s"]) and ev["round_latency_s"]["p50"] > 0


@pytest.mark.parametrize("program", sorted(PROGRAM_SETS))
def test_the_progress_total_is_the_count_of_on_round_calls_and_the_kernels(program: str) -> None:
    """Drift (b): IFCA's and the Oracle's total was rounds x devices while their callback fired once a round."""
    sets, unset = overrides(program, "tensor")
    sc = api.resolve(BASE, overrides=sets, unset=unset)
    calls: list[int] = []
    tensor = TensorSimulation(sc, on_round=lambda: calls.append(1))
    tensor.run()
    kernel = Simulation(sc.model_copy(update={"engine": "events"}))
    kernel.close()
    assert len(calls) == tensor.progress_total() == kernel.progress_total()


def test_a_diverged_model_is_scored_none_and_named_as_the_kernel_names_it() -> None:
    """Drift (c): a diverged model gave a NaN mean (and summary.json, written without NaN, failed)."""
    extra = ("data.dataset=synthetic_linear", "training.lr=1.0e20")
    ev, te = summary("local", "events", extra), summary("local", "tensor", extra)
    assert ev["diverged_nodes"] == list(range(8))  # the task diverges: the comparison is not vacuous
    assert te["diverged_nodes"] == ev["diverged_nodes"]
    assert te["rmse_mean"] is None and te["rmse_worst"] is None and te["rmse_per_node"] == [None] * 8
    assert [p["rmse_mean"] for p in te["rmse_curve"]] == [None, None]
    assert dumps_json(te)


def test_a_static_gossip_run_reports_no_exchange_counts() -> None:
    """Drift (d): the tensor engine always wrote ``exchanges_without_peer``; the kernel writes its exchange counts
    under dynamics only (a static fleet's isolated devices are in its topology)."""
    assert "exchanges_without_peer" not in summary("gossip", "events")
    assert "exchanges_without_peer" not in summary("gossip", "tensor")
