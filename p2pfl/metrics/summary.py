"""summary.json: the deterministic figures of one run, built from its totals (:class:`RunTotals`), which the
event kernel's Recorder (:func:`recorder_totals`) and the tensor engine (``p2pfl.tensor.simulation``) both fill:
one builder, so both engines write the same fields with the same meaning.

The score is metric-aware: ``metric`` is ``accuracy`` (classification), ``rmse``
(regression; lower is better, so the worst device is the highest) or
``success`` (robot rollouts). It names every score field: ``<metric>_mean``,
``<metric>_worst``, ``<metric>_per_node`` and ``<metric>_curve`` (mean device
score per evaluated round). Nothing that is not an accuracy is called one.

The ``energy`` block is the devices' energy account (``p2pfl.metrics.energy``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from p2pfl.metrics.energy import EnergyModel, energy_summary
from p2pfl.metrics.recorder import GridTime, Recorder

__all__ = ["METRICS", "metric_label", "scores", "finite_scores", "score_curve", "score_over_time", "score_on_grid",
           "round_latency", "RunTotals", "recorder_totals", "build_summary", "LOWER_IS_BETTER"]

#: metric -> axis/table label
METRICS: dict[str, str] = {"accuracy": "accuracy", "rmse": "RMSE", "success": "rollout success rate"}
#: metrics where a smaller value is better
LOWER_IS_BETTER = frozenset({"rmse"})


def metric_label(metric: str) -> str:
    """Human label of a metric for axes and table headers."""
    return METRICS.get(metric, metric)


def scores(metric: str, values: list[Optional[float]], diverged: tuple[int, ...] = ()) -> dict[str, Any]:
    """``<metric>_mean``, ``<metric>_worst`` and ``<metric>_per_node`` over the scored devices.

    When some device's final model diverged (its score is not a finite number), the run has no
    score: mean and worst are None and ``diverged_nodes`` lists those devices."""
    scored = [v for v in values if v is not None]
    worst = max if metric in LOWER_IS_BETTER else min
    return {
        "metric": metric,
        f"{metric}_mean": sum(scored) / len(scored) if scored and not diverged else None,
        f"{metric}_worst": worst(scored) if scored and not diverged else None,
        f"{metric}_per_node": values,
        **({"diverged_nodes": list(diverged)} if diverged else {}),
    }


def finite_scores(values: Sequence[float]) -> tuple[list[Optional[float]], tuple[int, ...]]:
    """Each device's score, None where it is not a finite number (a diverged model, as the Recorder records it),
    and those devices."""
    out: list[Optional[float]] = [float(v) if math.isfinite(v) else None for v in values]
    return out, tuple(i for i, v in enumerate(out) if v is None)


def score_curve(events: list[dict[str, Any]], metric: str, traffic: dict[int, tuple[int, int]] | None = None,
                n_devices: int = 1) -> list[dict[str, Any]]:
    """Mean device score per evaluated round, at the time the last device of that round was scored
    (``events``: the evaluations, or a whole event log); None for a round where a model diverged.
    With ``traffic`` (round -> bytes sent by all devices, by all servers, at that moment:
    ``Recorder.traffic_at_round``) each point also says ``bytes_per_device`` (the devices' mean) and
    ``bytes_servers``: the curve can be read at equal bytes."""
    by_round: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e["kind"] == "eval" and e["round"] is not None:
            by_round.setdefault(e["round"], []).append((e["t"], e[metric]))
    out = []
    for r, v in sorted(by_round.items()):
        point = {"round": r, "t": max(t for t, _ in v),
                 f"{metric}_mean": None if any(a is None for _, a in v) else sum(a for _, a in v) / len(v)}
        if traffic is not None and r in traffic:
            point.update(bytes_per_device=traffic[r][0] / n_devices, bytes_servers=traffic[r][1])
        out.append(point)
    return out


def score_over_time(evaluations: list[dict[str, Any]], metric: str, traffic: list[tuple[int, int]], n_devices: int,
                    points: int = 64) -> list[dict[str, Any]]:
    """The fleet's score over simulated time: the mean of each device's latest score over the devices scored so
    far (``devices_scored`` of them), with the bytes sent by then (``traffic``: all devices', all servers', at
    each evaluation), at up to ``points`` evaluations evenly spread in time, the last one included; None
    where a latest score is a diverged model's. Where a round's fleet-wide evaluation waits for its slowest
    device (churn), ``score_curve``'s points all come late; this one can be read at equal bytes or time."""
    if not evaluations:
        return []
    times = [e["t"] for e in evaluations]
    chosen = {len(times) - 1}
    for k in range(points - 1):  # the last evaluation at or before each of points - 1 evenly spaced times
        target = times[0] + (times[-1] - times[0]) * k / (points - 1)
        chosen.add(bisect.bisect_right(times, target) - 1)
    latest: dict[int, Optional[float]] = {}
    out = []
    for i, e in enumerate(evaluations):
        latest[e["node"]] = e[metric]
        if i in chosen:
            values = list(latest.values())
            mean = None if any(v is None for v in values) else math.fsum(v for v in values if v is not None) / len(values)
            out.append({"t": e["t"], f"{metric}_mean": mean, "devices_scored": len(values),
                        "bytes_per_device": traffic[i][0] / n_devices, "bytes_servers": traffic[i][1]})
    return out


def score_on_grid(grid: Sequence[GridTime], metric: str, n_devices: int) -> list[dict[str, Any]]:
    """The fleet's score at each time of the evaluation grid (``p2pfl.sim.grid``): the mean of every device's latest
    grid score (``devices_scored`` of them: every device once the protocol had a model for it, which every
    protocol has at t = 0), with ``devices_evaluated`` (those scored at that time; the others were offline and keep
    their last score) and the bytes sent by then; None where a latest score is a diverged model's. What
    ``score_over_time`` gives without a grid, at fixed times from the start."""
    latest: dict[int, Optional[float]] = {}
    out = []
    for g in grid:
        for e in g.evaluations:
            latest[e["node"]] = e[metric]
        values = list(latest.values())
        mean = None if not values or any(v is None for v in values) else \
            math.fsum(v for v in values if v is not None) / len(values)
        out.append({"t": g.t, f"{metric}_mean": mean, "devices_scored": len(values),
                    "devices_evaluated": len(g.evaluations), "bytes_per_device": g.device_bytes / n_devices,
                    "bytes_servers": g.server_bytes})
    return out


def round_latency(round_s: Sequence[float], rounds_of: str) -> dict[str, Any]:
    """Simulated seconds per round (``round_s``: each round's, of ``rounds_of``): p50, p95 (linear
    interpolation) and max; None when no round finished."""
    values = np.asarray(round_s, dtype=np.float64)
    if not len(values):
        return {"rounds_of": rounds_of, "n": 0, "p50": None, "p95": None, "max": None}
    p50, p95 = np.quantile(values, [0.5, 0.95])
    return {"rounds_of": rounds_of, "n": len(values), "p50": float(p50), "p95": float(p95), "max": float(values.max())}


@dataclass
class RunTotals:
    """What a run counted, as both engines hand it to :func:`build_summary`. Per node lists run over the devices
    (0..n-1), then the servers (in ``server_names``' order)."""

    n_devices: int
    server_names: tuple[str, ...]
    bytes_sent: list[int]  # per node
    bytes_received: list[int]
    bytes_relayed: list[int]  # received as a relay of a routed message (the devices')
    bytes_wan: int  # sent over hops that touch a server
    bytes_by_kind: dict[str, int]
    messages: int
    compute_flops: list[int]  # per node
    compute_sim_s_total: float  # modelled compute seconds, all nodes
    scores: list[Optional[float]]  # each device's final score (None: not scored, or diverged)
    diverged: tuple[int, ...]  # devices whose final model diverged
    curve: list[dict[str, Any]]  # the mean device score per evaluated round (``score_curve``)
    over_time: list[dict[str, Any]]  # the fleet's score over simulated time (``score_over_time``, ``score_on_grid``)
    round_s: Sequence[float]  # simulated seconds of every round
    rounds_of: str  # whose rounds ``round_s`` are: "device", "server" or "fleet" (the tensor engine's barriers)
    logs: dict[str, list[dict[str, Any]]]  # protocol metrics by name (a ``node`` field is dropped)
    messages_dropped: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    bytes_dropped_by_reason: dict[str, int] = field(default_factory=dict)


def recorder_totals(rec: Recorder, *, metric: str, n_devices: int, server_names: tuple[str, ...]) -> RunTotals:
    """The event kernel's totals, from its Recorder: rounds are the servers' where a server keeps the rounds
    (FedAvg, IFCA, ...), else the devices' (each device's round from its previous one's end; the first from the
    start); the score over time is the evaluation grid's where the run has one, else ``score_over_time``'s."""
    n = n_devices
    by = "server" if len(rec.round_s["server"]) else "device"
    return RunTotals(
        n_devices=n, server_names=server_names, bytes_sent=rec.bytes_sent, bytes_received=rec.bytes_received,
        bytes_relayed=rec.bytes_relayed, bytes_wan=rec.wan_bytes, bytes_by_kind=dict(rec.bytes_by_kind),
        messages=sum(rec.messages_sent), compute_flops=rec.compute_flops, compute_sim_s_total=sum(rec.compute_sim_s),
        scores=[rec.scores.get(i) for i in range(n)], diverged=tuple(sorted(d for d in rec.diverged if d < n)),
        curve=score_curve(rec.evaluations, metric, rec.traffic_at_round, n),
        over_time=(score_on_grid(rec.grid, metric, n) if rec.grid
                   else score_over_time(rec.evaluations, metric, rec.traffic_at_eval, n)),
        round_s=rec.round_s[by], rounds_of=by, logs=dict(rec.logs), messages_dropped=rec.messages_dropped,
        dropped_by_reason=dict(rec.dropped_by_reason), bytes_dropped_by_reason=dict(rec.bytes_dropped_by_reason))


def build_summary(totals: RunTotals, *, metric: str, head: dict[str, Any], sim_time_s: float,
                  tail: dict[str, Any], energy: EnergyModel,
                  score_fields: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """summary.json content: ``head`` (scenario, protocol, seed, ...), counts, scores (and after them what
    ``score_fields`` reads from the score curve: the federation's own), the devices' energy (``energy``: their
    constants), then ``tail``."""
    t, n = totals, totals.n_devices
    names = t.server_names
    out: dict[str, Any] = {
        **head,
        "n_devices": n,
        "n_servers": len(names),
        "sim_time_s": sim_time_s,
        **scores(metric, t.scores, t.diverged),
        **(score_fields(t.curve) if score_fields is not None else {}),
        "bytes_total": sum(t.bytes_sent),
        "messages_total": t.messages,
        "messages_dropped": t.messages_dropped,
        "messages_dropped_by_reason": dict(sorted(t.dropped_by_reason.items())),
        "bytes_dropped_by_reason": dict(sorted(t.bytes_dropped_by_reason.items())),
        "bytes_per_node": t.bytes_sent[:n],
        "bytes_received_per_node": t.bytes_received[:n],
        "bytes_relayed_per_node": t.bytes_relayed[:n],
        "bytes_per_server": {name: t.bytes_sent[n + k] for k, name in enumerate(names)},
        "bytes_received_per_server": {name: t.bytes_received[n + k] for k, name in enumerate(names)},
        "bytes_wan": t.bytes_wan,
        "bytes_device_to_device": sum(t.bytes_sent) - t.bytes_wan,
        "bytes_by_kind": dict(sorted(t.bytes_by_kind.items())),
        "compute_flops_total": sum(t.compute_flops),
        "compute_sim_s_total": t.compute_sim_s_total,
        "compute_flops_per_node": t.compute_flops[:n],
        "energy": energy_summary(energy, bytes_sent=t.bytes_sent[:n], bytes_received=t.bytes_received[:n],
                                 bytes_relayed=t.bytes_relayed[:n], flops=t.compute_flops[:n]),
        f"{metric}_curve": t.curve,
        f"{metric}_over_time": t.over_time,
        "round_latency_s": round_latency(t.round_s, t.rounds_of),
        "logs": {k: [{kk: vv for kk, vv in e.items() if kk != "node"} for e in v] for k, v in sorted(t.logs.items())},
    }
    out.update(tail)
    return out
