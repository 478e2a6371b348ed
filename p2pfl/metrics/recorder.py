"""The Recorder: the one place where bytes, messages, compute, scores and logs are counted.

Only the kernel and contexts talk to it; protocols never touch it directly.
Everything it holds is deterministic (simulated time and counts); measured
wall-clock figures are kept by the kernel and written to timing.json.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["Recorder"]


class Recorder:
    """Counters per node and an ordered event log."""

    def __init__(self, n_nodes: int, metric: str = "accuracy", on_round: Optional[Callable[[], None]] = None) -> None:
        self.n_nodes = n_nodes
        self.metric = metric
        self.events: list[dict[str, Any]] = []
        self.bytes_sent = [0] * n_nodes
        self.bytes_received = [0] * n_nodes
        self.messages_sent = [0] * n_nodes
        self.messages_dropped = 0
        self.bytes_by_kind: dict[str, int] = defaultdict(int)
        self.compute_flops = [0] * n_nodes
        self.compute_sim_s = [0.0] * n_nodes
        self.scores: dict[int, float] = {}
        self.logs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._on_round = on_round

    def event(self, t: float, kind: str, **fields: Any) -> None:
        """Append one event (``t``, ``kind`` and its fields) to the log."""
        self.events.append({"t": t, "kind": kind, **fields})

    def message(self, what: str, t: float, msg: Any, lost: bool, u: int, v: int, t_start: float) -> None:
        """Count one hop u->v of a message: a finished transmission (``send``) or an arrival (``deliver``)."""
        relayed = {"origin": msg.src, "target": msg.dst} if (u, v) != (msg.src, msg.dst) else {}
        if what == "send":
            self.bytes_sent[u] += msg.size_bytes
            self.messages_sent[u] += 1
            self.bytes_by_kind[msg.kind] += msg.size_bytes
            if lost:
                self.messages_dropped += 1
            self.event(t, "drop" if lost else "send", src=u, dst=v, msg=msg.kind, bytes=msg.size_bytes,
                       t_start=t_start, **relayed)
        else:
            self.bytes_received[v] += msg.size_bytes
            self.event(t, "deliver", src=msg.src, dst=msg.dst, msg=msg.kind, bytes=msg.size_bytes)

    def compute(self, t: float, node: int, flops: int, sim_s: float, what: str) -> None:
        """Count modelled compute charged to ``node``."""
        self.compute_flops[node] += int(flops)
        self.compute_sim_s[node] += sim_s
        self.event(t, "compute", node=node, what=what, flops=int(flops), sim_s=sim_s)

    def evaluation(self, t: float, node: int, score: float, round: Optional[int]) -> None:
        """Record a device's test score (field named by the run's metric); the latest per device is final."""
        self.scores[node] = score
        self.event(t, "eval", node=node, round=round, **{self.metric: score})

    def evaluation_later(self, t: float, node: int, round: Optional[int]) -> dict[str, Any]:
        """Record an evaluation whose score is not known yet; ``fill_evaluation`` sets it (in submit order)."""
        entry = {"t": t, "kind": "eval", "node": node, "round": round, self.metric: None}
        self.events.append(entry)
        return entry

    def fill_evaluation(self, entry: dict[str, Any], score: float) -> None:
        """Set the score of an evaluation recorded by ``evaluation_later``."""
        entry[self.metric] = score
        self.scores[entry["node"]] = score

    def log(self, t: float, node: Optional[int], name: str, value: Any, **fields: Any) -> None:
        """A protocol-specific metric (e.g. consensus distance)."""
        entry = {"t": t, "node": node, "value": value, **fields}
        self.logs[name].append(entry)
        self.event(t, "log", name=name, node=node, value=value, **fields)

    def round_done(self, t: float, node: Optional[int], round: int) -> None:
        """A node finished a round; drives the progress bar."""
        self.event(t, "round", node=node, round=round)
        if self._on_round is not None:
            self._on_round()
