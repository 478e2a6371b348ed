"""The round vocabulary every protocol uses: ``ctx.recv(kind, until=)``, ``ctx.collect`` and ``ctx.report_clusters``.

Each test runs a scripted protocol on four devices of a complete graph: device 0 collects, the others
send what the test says when it says; the assertions are on what device 0 got and when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Optional

import pytest

from p2pfl.clustering import adjusted_rand_index, misclassification_rate
from p2pfl.config import load_dict
from p2pfl.protocols.base import Process, Protocol, ProtocolParams
from p2pfl.sim.context import DeviceContext
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario

#: (delay before sending, round) of each sender's "m" message
Plan = dict[int, list[tuple[float, int]]]


def _script(plan: Plan, receive: Callable[[DeviceContext, dict[str, Any]], Process]) -> dict[str, Any]:
    """Run ``receive`` on device 0 while devices 1..3 send by ``plan``; what ``receive`` stored in ``out``."""
    out: dict[str, Any] = {}

    class Script(Protocol[ProtocolParams]):
        name = "script"

        def device(self, ctx: DeviceContext) -> Process:
            if ctx.id == 0:
                out["value"] = yield from receive(ctx, out)
                out["t"] = ctx.now
                return
            for delay, r in plan.get(ctx.id, []):
                yield ctx.sleep(delay)
                out.setdefault("sent", {})[(ctx.id, r)] = ctx.now
                yield ctx.send(0, "m", {"r": r}, round=r)

    sim = Simulation(load_dict(digits_scenario({"name": "local", "rounds": 1}, n=4, kind="complete")), Script)
    sim.run()
    out["arrived"] = {(e["src"], e["id"]): e["t"] for e in sim.recorder.events if e["kind"] == "deliver"}
    return out


def test_collect_returns_when_every_sender_answered_in_arrival_order() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        got = yield from ctx.collect("m", 1, (1, 2, 3), until=100.0)
        return list(got)

    out = _script({1: [(0.3, 1)], 2: [(0.1, 1)], 3: [(0.2, 1)]}, receive)
    assert out["value"] == [2, 3, 1]
    assert out["t"] == max(out["arrived"].values()) < 100.0


def test_collect_stops_at_the_deadline_and_drops_stale_and_later_rounds() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        got = yield from ctx.collect("m", 1, (1, 2, 3), until=5.0)
        return {j: m.round for j, m in got.items()}

    out = _script({1: [(0.0, 1)], 2: [(0.0, 2)], 3: [(0.0, 0)]}, receive)
    assert out["value"] == {1: 1}
    assert out["t"] == 5.0


def test_keep_later_hands_an_early_message_to_its_round() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        pending: dict[int, dict[int, Any]] = {}
        first = yield from ctx.collect("m", 1, (1, 2), until=5.0, keep_later=pending)
        out["first"] = sorted(first)
        t = ctx.now
        second = yield from ctx.collect("m", 2, (2,), keep_later=pending)
        assert ctx.now == t  # it was waiting already: no time passes
        return sorted(second)

    out = _script({1: [(0.0, 1)], 2: [(0.0, 2)]}, receive)
    assert out["first"] == [1] and out["value"] == [2]


def test_a_stale_message_in_a_synchronous_round_without_deadline_is_a_bug() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        return (yield from ctx.collect("m", 2, (1,), keep_later={}))

    with pytest.raises(RuntimeError, match="got a round-1 'm' message in round 2"):
        _script({1: [(0.0, 1)]}, receive)


def test_after_first_starts_the_deadline_at_the_first_answer() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        got = yield from ctx.collect("m", 1, (1, 2), after_first=0.5)
        return sorted(got)

    out = _script({1: [(2.0, 1)]}, receive)
    assert out["value"] == [1]
    assert out["t"] == pytest.approx(min(out["arrived"].values()) + 0.5, abs=0.0)


def test_each_sees_every_message_of_the_round_and_origin_names_the_sender() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        seen: list[int] = []
        got = yield from ctx.collect("m", 1, (10, 20), until=5.0, each=lambda m: seen.append(m.src),
                                     origin=lambda m: 10 * m.src)
        out["seen"] = seen
        return sorted(got)

    out = _script({1: [(0.1, 1)], 2: [(0.2, 1)], 3: [(0.0, 1)]}, receive)
    assert out["seen"] == [3, 1, 2]  # device 3 is no sender, but each() sees it
    assert out["value"] == [10, 20] and out["t"] < 5.0


def test_recv_until_a_deadline_gives_none_when_it_passes() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        with pytest.raises(TypeError, match="not both"):
            ctx.recv("m", timeout=1.0, until=1.0)
        msg = yield ctx.recv("m", until=ctx.deadline(1.0))
        out["early"] = msg
        msg = yield ctx.recv("m", until=4.0)
        out["at"] = ctx.now
        late = yield ctx.recv("m", until=1.0)  # a deadline already past still takes a waiting message
        return msg.src, late

    out = _script({1: [(2.0, 1)]}, receive)
    assert out["early"] is None and out["value"] == (1, None)
    assert out["at"] == out["arrived"][next(iter(out["arrived"]))]


def test_recvs_until_one_deadline_end_there_and_a_later_message_waits_in_the_inbox() -> None:
    def receive(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        got = []
        for _ in range(3):  # the first takes device 1's message, the second ends at 3.0, the third at once
            msg = yield ctx.recv("m", until=3.0)
            got.append((None if msg is None else msg.src, ctx.now))
        msg = yield ctx.recv("m")  # device 2's, sent after the deadline: it waited in the inbox
        got.append((msg.src, ctx.now))
        return got

    out = _script({1: [(1.0, 1)], 2: [(5.0, 1)]}, receive)
    arrived = {src: t for (src, _), t in out["arrived"].items()}
    assert out["value"] == [(1, arrived[1]), (None, 3.0), (None, 3.0), (2, arrived[2])]


def test_a_message_that_arrives_at_the_deadline_itself_is_late_and_waits_in_the_inbox() -> None:
    def first(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        msg = yield ctx.recv("m")
        return msg.src

    arrival = next(iter(_script({1: [(1.0, 1)]}, first)["arrived"].values()))

    def at_deadline(ctx: DeviceContext, out: dict[str, Any]) -> Process:
        # the message is on the wire; 2^-20 before it, so that now + (arrival - now) is the arrival time exactly
        # (arrival is in [1, 2)): the deadline's timer and the message are due at one simulated time
        assert 1.0 <= arrival < 2.0
        yield ctx.sleep(until=arrival - 2.0**-20)
        late = yield ctx.recv("m", until=arrival)
        out["late"] = (late, ctx.now)
        msg = yield ctx.recv("m", until=arrival)  # the deadline has passed: a waiting message is still taken
        return msg.src

    out = _script({1: [(1.0, 1)]}, at_deadline)
    assert out["late"] == (None, arrival) and out["value"] == 1 and out["t"] == arrival


class _Reporter(Protocol[ProtocolParams]):
    """Device 0 reports two groupings; the final one is ``clusters()``."""

    name = "reporter"
    cluster_fields: ClassVar[tuple[str, ...]] = ("clusters", "ari", "misclassification_rate", "n_federations",
                                                 "clustering_events")
    FIRST: ClassVar[list[list[int]]] = [[0, 1, 2, 3]]
    FINAL: ClassVar[list[list[int]]] = [[0, 2], [1, 3]]

    def device(self, ctx: DeviceContext) -> Process:
        if ctx.id == 0:
            ctx.report_clusters(self.FIRST, round=1)
            yield ctx.sleep(1.0)
            ctx.report_clusters(self.FINAL, round=2, log=False)
        ctx.round_done(1)

    def clusters(self) -> Optional[list[list[int]]]:
        return self.FINAL


def test_reported_clusters_are_scored_by_the_kernel() -> None:
    sc = digits_scenario({"name": "local", "rounds": 1}, n=4, kind="complete")
    sc["data"]["partition"] = {"kind": "label_shift", "n_clusters": 2}
    sim = Simulation(load_dict(sc), _Reporter)
    s = sim.run()
    truth = s["true_clusters"]
    assert s["clusters"] == _Reporter.FINAL and s["ari"] == adjusted_rand_index(truth, _Reporter.FINAL)
    assert s["misclassification_rate"] == misclassification_rate(truth, _Reporter.FINAL)
    assert s["n_federations"] == 2
    assert [e["round"] for e in s["clustering_events"]] == [1, 2] and s["clustering_events"][1]["t"] == 1.0
    logged = [e for e in sim.recorder.events if e["kind"] == "log" and e["name"] == "ari"]  # log=True only
    assert [(e["node"], e["round"], e["value"]) for e in logged] == [(0, 1, adjusted_rand_index(truth, _Reporter.FIRST))]
    keys = list(s)
    assert keys.index("clusters") < keys.index("ari") < keys.index("clustering_events")


def test_a_protocol_that_does_not_cluster_has_no_cluster_fields() -> None:
    s = Simulation(load_dict(digits_scenario({"name": "local", "rounds": 1}, n=3))).run()
    assert "clusters" not in s and "ari" not in s and "clustering_events" not in s
