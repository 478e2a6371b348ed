"""Deferred uploads (``executor: {defer_uploads: true}``): a server round's jobs train together, with the
same modelled history, and the same bits wherever the executor reads each outcome alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import p2pfl
from tests.helpers import digits_scenario

#: what does not depend on how (or when) the jobs are trained: bytes, FLOPs, simulated time
MODELLED = ("bytes_total", "bytes_by_kind", "compute_flops_total", "sim_time_s", "messages_total")


def _scenario(protocol: dict[str, Any], executor: str, defer: bool, **extra: Any) -> dict[str, Any]:
    raw = digits_scenario({"rounds": 3, "eval_every": 1, **protocol}, n=8, servers=True, **extra)
    raw["data"]["samples_per_client"] = 60
    raw["executor"] = {"kind": executor, "defer_uploads": defer}
    return raw


def _run(raw: dict[str, Any], out: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """The run's summary and timing (its run directory written to ``out``)."""
    result = p2pfl.run(raw, out=out)
    return result.summary, result.timing


@pytest.mark.parametrize("protocol", [{"name": "fedavg"}, {"name": "ifca", "n_clusters": 2},
                                      {"name": "oracle"}])
@pytest.mark.slow
def test_inline_deferred_uploads_give_the_same_run_byte_for_byte(protocol, tmp_path):
    _run(_scenario(protocol, "inline", False), tmp_path / "now")
    _run(_scenario(protocol, "inline", True), tmp_path / "deferred")
    for name in ("summary.json", "events.jsonl"):
        assert (tmp_path / "now" / name).read_bytes() == (tmp_path / "deferred" / name).read_bytes()


@pytest.mark.slow
def test_batched_deferred_uploads_stack_a_server_round_with_the_same_modelled_history(tmp_path):
    alone, timing_alone = _run(_scenario({"name": "fedavg"}, "batched", False), tmp_path / "alone")
    stacked, timing = _run(_scenario({"name": "fedavg"}, "batched", True), tmp_path / "stacked")
    assert timing_alone["stacked_jobs"] == 0  # the staggered broadcast: each job over before the next
    assert timing["stacked_jobs"] == 8 * 3  # every round's eight jobs read together, at the server
    assert abs(stacked["accuracy_mean"] - alone["accuracy_mean"]) <= 0.02  # the batched tolerance
    for key in MODELLED:
        assert json.dumps(stacked[key]) == json.dumps(alone[key])


@pytest.mark.slow
def test_an_update_the_server_never_reads_moves_the_device_generator_before_its_next_job(tmp_path):
    """Under churn with a round deadline some uploads come late and are never read by the server: the
    device reads its own before it trains again, so its batch order is the same as reading at once."""
    dynamics = {"churn": {"offline": 0.3, "cycle_s": 2.0}}
    protocol = {"name": "fedavg", "round_timeout_s": 1.0, "rounds": 6}
    slow = {"flops_per_s": 1.0e6}  # a job of about half a second: going offline cuts some
    _run(_scenario(protocol, "inline", False, dynamics=dynamics, devices=slow), tmp_path / "now")
    summary, _ = _run(_scenario(protocol, "inline", True, dynamics=dynamics, devices=slow), tmp_path / "deferred")
    assert summary["updates_missing"] > 0  # some uploads were not read by the server
    for name in ("summary.json", "events.jsonl"):
        assert (tmp_path / "now" / name).read_bytes() == (tmp_path / "deferred" / name).read_bytes()
