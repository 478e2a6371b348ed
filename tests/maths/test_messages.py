"""Message sizes declared per message kind (``p2pfl.maths.messages``) against the payloads the event kernel
measures: every message a protocol sends is its declared size, and every declared kind is sent."""

from __future__ import annotations

import contextlib

import pytest

from p2pfl import api
from p2pfl.clustering.rnd import predictor_state_bytes
from p2pfl.maths.messages import MESSAGES, Carries, message_size
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES
from p2pfl.sim.kernel import Simulation
from p2pfl.tensor.simulation import TensorSimulation
from tests.engine.programs import BASE, PROGRAM_SETS, overrides


@pytest.fixture(autouse=True)
def no_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's collector settings change no result (``few_collections``, tested in tests/sim); its full
    collection at a run's start costs a test process more than these runs do."""
    monkeypatch.setattr("p2pfl.sim.kernel.few_collections", contextlib.nullcontext)

def test_a_message_is_its_header_models_and_scalars() -> None:
    assert Carries(models=1, scalars=2).size(1000) == HEADER_BYTES + 1000 + 2 * SCALAR_BYTES
    assert Carries(models=1, per_cluster=True).size(1000, clusters=3) == HEADER_BYTES + 3000
    assert Carries(scalars=1).size(1000, clusters=3) == HEADER_BYTES + SCALAR_BYTES
    assert set(MESSAGES) == set(PROGRAM_SETS)


@pytest.mark.parametrize("program", sorted(PROGRAM_SETS))
def test_every_message_the_kernel_sends_is_its_declared_size(program: str) -> None:
    sets, unset = overrides(program, "events")
    sc = api.resolve(BASE, overrides=sets, unset=unset)
    fleet = TensorSimulation(sc.model_copy(update={"engine": "tensor"})).program.fleet
    state_bytes, predictor_bytes = fleet.state_bytes, predictor_state_bytes(fleet.trainer.data.input_shape)
    kernel = Simulation(sc)
    kernel.run()
    sent = [e for e in kernel.recorder.events if e["kind"] == "send"]
    clusters = getattr(sc.protocol, "n_clusters", 1)
    assert {e["msg"] for e in sent} == set(MESSAGES[program])  # every kind declared, every declared kind sent
    measured = {(e["msg"], e["bytes"]) for e in sent}
    assert measured == {(kind, message_size(program, kind, state_bytes, clusters, predictor_bytes=predictor_bytes))
                        for kind in MESSAGES[program]}
