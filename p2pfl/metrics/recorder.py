"""The Recorder: the one place where bytes, messages, compute, scores and logs are counted.

Only the kernel and contexts talk to it; protocols never touch it directly.
Everything it holds is deterministic (simulated time and counts); measured
wall-clock figures are kept by the kernel and written to timing.json.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TextIO

__all__ = ["GridTime", "Recorder", "event_line"]


_ENCODE = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode  # one encoder, not one per line


def event_line(event: Mapping[str, Any]) -> str:
    """One line of events.jsonl."""
    return _ENCODE(event) + "\n"


@dataclass
class GridTime:
    """One time of the evaluation grid (``p2pfl.sim.grid``): ``t``, the bytes sent by all devices and by all servers
    by then, and its evaluations (``grid_eval`` events, completed as their scores come back)."""

    t: float
    device_bytes: int
    server_bytes: int
    evaluations: list[dict[str, Any]] = field(default_factory=list)


class Recorder:
    """Counters per node and an ordered event log.

    Without a ``sink`` the log stays in ``events``. With one (the run directory's
    events.jsonl, being written), each event is written as soon as every event before
    it is complete (an evaluation's score may come back from a worker later), so memory
    stays bounded however long the run; ``events`` is then empty. Evaluations are also
    kept in ``evaluations`` (the score curve is built from them).
    """

    def __init__(self, n_nodes: int, metric: str = "accuracy", on_round: Optional[Callable[[], None]] = None,
                 sink: Optional[TextIO] = None, n_devices: Optional[int] = None, messages: bool = True) -> None:
        self.n_nodes = n_nodes
        #: log each message hop (send, deliver, drop) as an event; counted either way
        self.messages = messages
        #: nodes 0..n_devices-1 are devices, the rest servers
        self.n_devices = n_nodes if n_devices is None else n_devices
        #: bytes sent so far by all devices / all servers, and their values at each round's latest evaluation
        self.device_bytes = 0
        self.server_bytes = 0
        #: bytes sent over hops that touch a server (the WAN: device-server, server-server)
        self.wan_bytes = 0
        self.traffic_at_round: dict[int, tuple[int, int]] = {}
        #: (bytes sent by all devices, by all servers) at each of ``evaluations``, in step with it
        self.traffic_at_eval: list[tuple[int, int]] = []
        self.metric = metric
        self.events: list[dict[str, Any]] = []
        self.evaluations: list[dict[str, Any]] = []
        self.n_events = 0
        self._sink = sink
        self._unwritten: deque[dict[str, Any]] = deque()
        self._pending: set[int] = set()  # ids of evaluations awaiting their score
        self.bytes_sent = [0] * n_nodes
        self.bytes_received = [0] * n_nodes
        #: bytes a node received as a relay of a routed message it then forwarded (or was stopped
        #: from forwarding): its radio received them, though they were not for it
        self.bytes_relayed = [0] * n_nodes
        self.messages_sent = [0] * n_nodes
        self.messages_dropped = 0
        self.dropped_by_reason: dict[str, int] = defaultdict(int)
        self.bytes_dropped_by_reason: dict[str, int] = defaultdict(int)
        self.bytes_by_kind: dict[str, int] = defaultdict(int)
        self.compute_flops = [0] * n_nodes
        self.compute_sim_s = [0.0] * n_nodes
        self.scores: dict[int, Optional[float]] = {}
        #: devices whose latest score was not a finite number (their model diverged)
        self.diverged: set[int] = set()
        self.logs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        #: simulated seconds of every round a device / a server finished (from its previous round's end,
        #: or from the start for its first)
        self.round_s: dict[str, array[float]] = {"device": array("d"), "server": array("d")}
        self._round_end: dict[int, float] = {}
        self._on_round = on_round
        #: the evaluation grid's times, each with its evaluations (``p2pfl.sim.grid``): measurements apart from the
        #: protocol's evaluations (they set no final score); and how many events they wrote (no protocol activity)
        self.grid: list[GridTime] = []
        self.grid_events = 0

    def event(self, t: float, kind: str, **fields: Any) -> None:
        """Append one event (``t``, ``kind`` and its fields) to the log."""
        self._append({"t": t, "kind": kind, **fields})

    def stream_to(self, sink: TextIO) -> None:
        """Write events to ``sink`` from now on (before the first event)."""
        if self.n_events:
            raise RuntimeError("stream_to must come before the first event")
        self._sink = sink

    def _append(self, entry: dict[str, Any]) -> None:
        self.n_events += 1
        if self._sink is None:
            self.events.append(entry)
            return
        self._unwritten.append(entry)
        self._write_ready()

    def _write_ready(self) -> None:
        assert self._sink is not None
        queue, pending, write = self._unwritten, self._pending, self._sink.write
        while queue and id(queue[0]) not in pending:
            write(event_line(queue.popleft()))

    def close(self) -> None:
        """Write what is left to the sink (every evaluation must be complete by now)."""
        if self._sink is not None:
            if self._pending:
                raise RuntimeError(f"{len(self._pending)} evaluations still await their scores")
            self._write_ready()

    def message(self, what: str, msg: Any, u: int, v: int, t: float, reason: str = "", transmitted: bool = True,
                t_start: float = 0.0) -> None:
        """Count one hop u->v of a message: transmitted (``send``, its bytes counted here and only
        here), arrived at its destination (``deliver``) or dropped (``drop``, with a ``reason``); logged as an
        event unless ``messages`` is off.
        Events carry the message's ``id`` (its sequence number), so a message can be followed hop by hop.
        A hop that leaves a relay (``u`` is not the message's source), transmitted or dropped before
        it is, counts the message as received by that relay (``bytes_relayed``)."""
        if what == "deliver":
            self.bytes_received[v] += msg.size_bytes
            if self.messages:
                self.event(t, "deliver", src=msg.src, dst=msg.dst, msg=msg.kind, bytes=msg.size_bytes, id=msg.seq)
            return
        relayed = {"origin": msg.src, "target": msg.dst} if (u, v) != (msg.src, msg.dst) else {}
        if u != msg.src and (what == "send" or not transmitted):
            self.bytes_relayed[u] += msg.size_bytes
        if what == "send":
            self.bytes_sent[u] += msg.size_bytes
            if u < self.n_devices:
                self.device_bytes += msg.size_bytes
            else:
                self.server_bytes += msg.size_bytes
            if u >= self.n_devices or v >= self.n_devices:
                self.wan_bytes += msg.size_bytes
            self.messages_sent[u] += 1
            self.bytes_by_kind[msg.kind] += msg.size_bytes
            if self.messages:
                self.event(t, "send", src=u, dst=v, msg=msg.kind, bytes=msg.size_bytes, t_start=t_start, id=msg.seq,
                           **relayed)
            return
        self.messages_dropped += 1
        self.dropped_by_reason[reason] += 1
        self.bytes_dropped_by_reason[reason] += msg.size_bytes
        if self.messages:
            self.event(t, "drop", src=u, dst=v, msg=msg.kind, bytes=msg.size_bytes, reason=reason,
                       transmitted=transmitted, id=msg.seq, **relayed)

    def compute(self, t: float, node: int, flops: int, sim_s: float, what: str) -> None:
        """Count modelled compute charged to ``node``."""
        self._charge(node, flops, sim_s)
        self.event(t, "compute", node=node, what=what, flops=int(flops), sim_s=sim_s)

    def _charge(self, node: int, flops: int, sim_s: float) -> None:
        self.compute_flops[node] += int(flops)
        self.compute_sim_s[node] += sim_s

    def event_later(self, t: float, kind: str, **fields: Any) -> dict[str, Any]:
        """An event written in its place but completed later (``fill_event``): a job's result."""
        entry = {"t": t, "kind": kind, **fields}
        self._pending.add(id(entry))
        self._append(entry)
        return entry

    def fill_event(self, entry: dict[str, Any], **fields: Any) -> None:
        """Complete an event recorded by ``event_later`` (its keys keep their order)."""
        entry.update(fields)
        self._pending.discard(id(entry))
        if self._sink is not None:
            self._write_ready()

    def compute_later(self, t: float, node: int, what: str) -> dict[str, Any]:
        """A compute charge whose FLOPs are known when its job is done (``fill_compute``)."""
        return self.event_later(t, "compute", node=node, what=what, flops=None, sim_s=None)

    def fill_compute(self, entry: dict[str, Any], flops: int, sim_s: float) -> None:
        self._charge(entry["node"], flops, sim_s)
        self.fill_event(entry, flops=int(flops), sim_s=sim_s)

    def log_later(self, t: float, node: Optional[int], name: str, **fields: Any) -> tuple[dict, dict]:
        """A protocol metric whose value is known later (``fill_log``); ``fields`` fix the keys' order."""
        entry = {"t": t, "node": node, "value": None, **fields}
        self.logs[name].append(entry)
        return entry, self.event_later(t, "log", name=name, node=node, value=None, **fields)

    def fill_log(self, entries: tuple[dict, dict], value: Any, **fields: Any) -> None:
        entries[0].update(value=value, **fields)
        self.fill_event(entries[1], value=value, **fields)

    def evaluation(self, t: float, node: int, score: float, round: Optional[int]) -> None:
        """Record a device's test score (field named by the run's metric); the latest per device is final."""
        self.fill_evaluation(self.evaluation_later(t, node, round), score)

    def evaluation_later(self, t: float, node: int, round: Optional[int]) -> dict[str, Any]:
        """Record an evaluation whose score is not known yet; ``fill_evaluation`` sets it (in submit order)."""
        entry = self.event_later(t, "eval", node=node, round=round, **{self.metric: None})
        self.evaluations.append(entry)
        self.traffic_at_eval.append((self.device_bytes, self.server_bytes))
        if round is not None:
            self.traffic_at_round[round] = (self.device_bytes, self.server_bytes)
        return entry

    def fill_evaluation(self, entry: dict[str, Any], score: float) -> None:
        """Set the score of an evaluation recorded by ``evaluation_later``. A score that is not a finite
        number (a diverged model: NaN or infinite loss) is recorded as None with ``diverged: true``."""
        node = entry["node"]
        value: Optional[float] = score
        if math.isfinite(score):
            self.diverged.discard(node)
        else:
            value, entry["diverged"] = None, True
            self.diverged.add(node)
        self.scores[node] = value
        self.fill_event(entry, **{self.metric: value})

    def grid_time(self, t: float) -> None:
        """A time of the evaluation grid: the grid evaluations recorded next (``grid_evaluation_later``) are its."""
        self.grid.append(GridTime(t, self.device_bytes, self.server_bytes))

    def grid_evaluation_later(self, t: float, node: int) -> dict[str, Any]:
        """A grid evaluation of ``node`` (a ``grid_eval`` event) whose score is not known yet
        (``fill_grid_evaluation``); it is the latest grid time's."""
        entry = self.event_later(t, "grid_eval", node=node, **{self.metric: None})
        self.grid[-1].evaluations.append(entry)
        self.grid_events += 1
        return entry

    def fill_grid_evaluation(self, entry: dict[str, Any], score: float) -> None:
        """Set a grid evaluation's score; one that is not a finite number (a diverged model) is recorded as None
        with ``diverged: true``, as ``fill_evaluation`` does. Final scores are the protocol's evaluations' only."""
        value: Optional[float] = score
        if not math.isfinite(score):
            value, entry["diverged"] = None, True
        self.fill_event(entry, **{self.metric: value})

    def log(self, t: float, node: Optional[int], name: str, value: Any, **fields: Any) -> None:
        """A protocol-specific metric (e.g. consensus distance); a float that is not finite (a diverged
        model's distance) is logged as None, since JSON has no NaN."""
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        entry = {"t": t, "node": node, "value": value, **fields}
        self.logs[name].append(entry)
        self.event(t, "log", name=name, node=node, value=value, **fields)

    def round_done(self, t: float, node: Optional[int], round: int) -> None:
        """A node finished a round; drives the progress bar and times the round."""
        self.event(t, "round", node=node, round=round)
        if node is not None:
            self.round_s["device" if node < self.n_devices else "server"].append(t - self._round_end.get(node, 0.0))
            self._round_end[node] = t
        if self._on_round is not None:
            self._on_round()
