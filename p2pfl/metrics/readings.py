"""Two arms' scores read under every cost a fleet pays (issue 70): at equal device radio energy (the mean device and
the worst device), at equal device uplink bytes, at equal total bytes (servers included), at equal simulated
time, and at the end.

    cost_curve(summary)        a run's score curve, each point with what the run had paid by then
    at_budget(curve, cost, x)  the score at budget ``x`` of ``cost`` (interpolated), None: never observed there
    read(a, b, cost)           both arms at the budget both reached: ``Reading(budget, a, b)``
    readings(a, b)             every cost of ``COSTS``, and ``END``
    gain_difference(r, l, o)   a reading as the difference of the arms' headroom gains (claims.headroom_gain)

**The rule.** "At equal X" reads each arm's score at the budget X* = the smaller of the two arms' final X (their
totals at the end of the run), each arm interpolated linearly between the two evaluations around X*. X* is the
largest budget at which both arms were observed: at a larger one the cheaper arm would be extrapolated past its
end (credited with a plateau it may not keep, or charged for one it never reached); a smaller one (a fixed share
of the cheaper arm's spend, say) drops the end of its run and makes the verdict depend on the share chosen.
Linear interpolation instead of the last evaluation at or below the budget (``p2pfl.metrics.curves.at_traffic``,
the old headline report's step rule): the step reads an arm evaluated every 4 rounds up to 4 rounds late, a bias
against sparse evaluation; interpolation is exact at every evaluation and between two assumes steady progress.
An arm whose first evaluation comes after X* has **no reading** there (``None``): its score before its first
evaluation was never measured, and nothing is extrapolated towards the origin. Each curve ends with the run's end
(its totals and its final score, the summary's ``<metric>_mean``), so the arm that spent less is read at exactly
its end; the end reading (``END``) is the two final scores, whatever each spent.

**The costs of a point** (from the summary: its curve's points carry ``t``, ``bytes_per_device`` (the devices'
mean bytes sent by then) and ``bytes_servers``; its end carries the run's totals and the energy account):

- ``time``: simulated seconds ``t``; at the end ``sim_time_s``.
- ``device_uplink``: ``bytes_per_device``; at the end the mean of ``bytes_per_node``.
- ``total_bytes``: every node's bytes sent, servers included: ``n x bytes_per_device + bytes_servers``.
- ``energy_mean`` / ``energy_worst``: the radio joules of the mean device / of the device that spends the most
  at the end, by the project's J/bit model (``p2pfl.metrics.energy``: 8 x bytes sent x J/bit sent + 8 x bytes
  received x J/bit received; compute joules are not radio). The end values are the summary's energy account
  (``energy.j_per_device.radio_mean`` / ``radio_max``). Before the end a point knows the devices' bytes sent and
  the servers' bytes sent, not the devices' bytes received, which are estimated: every byte a server sends is
  received by a device, and a fixed share rho of the devices' bytes sent is received by devices, the share the
  whole run shows (rho = (R - B) / S at the end, R the devices' bytes received and relayed, B the servers' bytes
  sent, S the devices' bytes sent; clipped at 0), scaled so the end is exact: R(p) = R (B(p) + rho S(p)) / (B +
  rho S). rho is 0 for a server protocol (devices send to the server only) and about 1 for gossip, so the
  estimate is exact for both up to lost messages. A point's energy is the end energy times the share of the
  run's radio work done by then, (e_s S(p) + e_r R(p)) / (e_s S + e_r R) with the fleet's J/bit constants e_s,
  e_r (their midpoint where devices differ): exact for the mean device with one constant for the fleet; for the
  worst device it assumes that device spends at the fleet's pace (true of round-based protocols, where every
  device sends and receives about the same each round).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal, NamedTuple, Optional

from p2pfl.metrics.claims import headroom_gain

__all__ = ["COSTS", "END", "READINGS", "COST_LABELS", "CostCurve", "Reading", "cost_curve", "at_budget", "read",
           "readings", "gain_difference"]

#: the costs a comparison is read at (``CostCurve.costs`` keys)
COSTS = ("energy_mean", "energy_worst", "device_uplink", "total_bytes", "time")
#: the reading at the ends of the runs
END = "end"
#: every reading, in the decision table's column order
READINGS = (*COSTS, END)
#: a column heading per reading
COST_LABELS = {"energy_mean": "equal device radio energy (mean device)",
               "energy_worst": "equal device radio energy (worst device)",
               "device_uplink": "equal device uplink bytes", "total_bytes": "equal total bytes (servers included)",
               "time": "equal simulated time", END: "at the end"}
_TOL = 1e-9  # relative: a budget read from a run's own figures includes its own point


@dataclass(frozen=True)
class CostCurve:
    """A run's score at each evaluation and at its end (``scores``), with what it had paid by then: ``costs[c][i]``
    for each cost ``c`` of ``COSTS``, nondecreasing in ``i``. The last point is the run's end."""

    scores: tuple[float, ...]
    costs: Mapping[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        if not self.scores:
            raise ValueError("a cost curve needs at least one point (the run's end)")
        for name in COSTS:
            values = self.costs.get(name)
            if values is None or len(values) != len(self.scores):
                raise ValueError(f"cost {name!r} needs one value per point ({len(self.scores)})")
            if any(b < a - _TOL * abs(a) for a, b in pairwise(values)):  # rounding aside
                raise ValueError(f"cost {name!r} must not decrease along the curve; got {list(values)}")

    @property
    def final(self) -> float:
        """The score at the end."""
        return self.scores[-1]

    def total(self, cost: str) -> float:
        """What the run paid of ``cost`` by its end."""
        return self.costs[cost][-1]


class Reading(NamedTuple):
    """Two arms read at one budget: ``budget`` (None for ``END``) and each arm's score there (None: no reading)."""

    budget: Optional[float]
    a: Optional[float]
    b: Optional[float]

    @property
    def difference(self) -> Optional[float]:
        """a - b, where both have a reading."""
        return None if self.a is None or self.b is None else self.a - self.b


def _constant(value: Any) -> float:
    """An energy constant as the summary states it: a number, or ``{min, max}`` (its midpoint)."""
    if isinstance(value, Mapping):
        return (float(value["min"]) + float(value["max"])) / 2
    return float(value)


def cost_curve(summary: Mapping[str, Any], curve: Literal["curve", "over_time"] = "curve") -> CostCurve:
    """A run's ``CostCurve`` from its summary.json: the points of its ``<metric>_curve`` (``over_time``: of its
    ``<metric>_over_time``, the reading for churned fleets, whose round points all come late; from t = 0 and at
    fixed times where the run had an evaluation grid, ``p2pfl.sim.grid``) that have a score, then its end. The
    costs of each point are those of the module docstring."""
    metric = summary.get("metric", "accuracy")
    points = [p for p in summary.get(f"{metric}_{curve}") or [] if p.get(f"{metric}_mean") is not None]
    final = summary.get(f"{metric}_mean")
    if final is None:
        raise ValueError(f"the run has no final {metric} (diverged: {summary.get('diverged_nodes')})")
    n = int(summary["n_devices"])
    sent = float(sum(summary["bytes_per_node"]))
    received = float(sum(summary["bytes_received_per_node"]) + sum(summary.get("bytes_relayed_per_node") or ()))
    servers = float(sum((summary.get("bytes_per_server") or {}).values()))
    energy = summary["energy"]
    e_send, e_recv = _constant(energy["model"]["send_j_per_bit"]), _constant(energy["model"]["receive_j_per_bit"])
    rho = max(0.0, (received - servers) / sent) if sent > 0 else 0.0
    reach = servers + rho * sent
    work = e_send * sent + e_recv * received
    mean_j, worst_j = float(energy["j_per_device"]["radio_mean"]), float(energy["j_per_device"]["radio_max"])

    def share(dev_sent: float, srv_sent: float) -> float:  # of the run's radio work done by then
        recv = received * (srv_sent + rho * dev_sent) / reach if reach > 0 else 0.0
        return (e_send * dev_sent + e_recv * recv) / work if work > 0 else 0.0

    costs: dict[str, list[float]] = {c: [] for c in COSTS}
    for p in points:
        dev_sent, srv_sent = float(round(n * float(p["bytes_per_device"]))), float(p["bytes_servers"])  # bytes
        part = share(dev_sent, srv_sent)
        for name, value in (("energy_mean", mean_j * part), ("energy_worst", worst_j * part),
                            ("device_uplink", float(p["bytes_per_device"])), ("total_bytes", dev_sent + srv_sent),
                            ("time", float(p["t"]))):
            costs[name].append(value)
    for name, value in (("energy_mean", mean_j), ("energy_worst", worst_j), ("device_uplink", sent / n),
                        ("total_bytes", sent + servers), ("time", float(summary["sim_time_s"]))):
        costs[name].append(value)
    scores = tuple(float(p[f"{metric}_mean"]) for p in points) + (float(final),)
    return CostCurve(scores=scores, costs={k: tuple(v) for k, v in costs.items()})


def at_budget(curve: CostCurve, cost: str, budget: float) -> Optional[float]:
    """The score at ``budget`` of ``cost``: at the last point that had paid exactly that (within a relative 1e-9),
    else interpolated linearly between the last point below and the first above. None when the first point
    already paid more, or the end paid less (the run never reached the budget)."""
    xs, ys = curve.costs[cost], curve.scores
    lo, hi = budget * (1 - _TOL), budget * (1 + _TOL)
    if xs[0] > hi or xs[-1] < lo:
        return None
    at = [i for i, x in enumerate(xs) if lo <= x <= hi]
    if at:
        return ys[at[-1]]
    i = max(i for i, x in enumerate(xs) if x < budget)  # xs[i] < budget < xs[i + 1]
    w = (budget - xs[i]) / (xs[i + 1] - xs[i])
    return ys[i] + w * (ys[i + 1] - ys[i])


def read(a: CostCurve, b: CostCurve, cost: str) -> Reading:
    """Both arms at the budget both reached, the smaller of their totals of ``cost`` (``END``: the final scores)."""
    if cost == END:
        return Reading(None, a.final, b.final)
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; one of {list(READINGS)}")
    budget = min(a.total(cost), b.total(cost))
    return Reading(budget, at_budget(a, cost, budget), at_budget(b, cost, budget))


def readings(a: CostCurve, b: CostCurve, which: Sequence[str] = READINGS) -> dict[str, Reading]:
    """``read`` at every reading of ``which`` (default all: ``READINGS``)."""
    return {cost: read(a, b, cost) for cost in which}


def gain_difference(r: Reading, local: float, oracle: float) -> Optional[float]:
    """The reading as a difference of headroom gains, a - b (``p2pfl.metrics.claims.headroom_gain``, the same
    seed's Local and Oracle); None without both readings or without headroom."""
    if r.a is None or r.b is None:
        return None
    diff = headroom_gain(r.a, local, oracle) - headroom_gain(r.b, local, oracle)
    return None if math.isnan(diff) else diff
