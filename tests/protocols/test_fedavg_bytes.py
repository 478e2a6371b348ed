"""FedAvg moves exactly 2 x clients x rounds models plus headers (and one sample count per upload)."""

from __future__ import annotations

import pytest

import p2pfl
from p2pfl.learning.models import ModelSpec, build_model
from p2pfl.sim.cost import HEADER_BYTES, SCALAR_BYTES, payload_bytes
from tests.helpers import digits_scenario


def _model_bytes(hidden: int) -> int:
    return payload_bytes(dict(build_model(ModelSpec(name="mlp", hidden=hidden), (1, 8, 8), 10, seed=0).state_dict()))


@pytest.mark.parametrize("n,rounds", [(4, 3), (6, 2)])
@pytest.mark.slow
def test_fedavg_total_bytes_are_exact(n, rounds):
    result = p2pfl.run(digits_scenario({"name": "fedavg", "rounds": rounds}, n=n, servers=True), write=False)
    model = _model_bytes(16)
    assert model == (64 * 16 + 16 + 16 * 10 + 10) * 4
    expected = rounds * n * (2 * (model + HEADER_BYTES) + SCALAR_BYTES)
    assert result.bytes_total == expected
    assert result.messages_total == 2 * n * rounds
    assert result.bytes_per_server["server"] == rounds * n * (model + HEADER_BYTES)
    assert result.bytes_per_node == [rounds * (model + HEADER_BYTES + SCALAR_BYTES)] * n


def test_fedavg_client_fraction_selects_that_many_clients_per_round():
    result = p2pfl.run(digits_scenario({"name": "fedavg", "rounds": 4, "client_fraction": 0.5}, n=6, servers=True),
                       write=False)
    model = _model_bytes(16)
    assert result.messages_total == 2 * 3 * 4
    assert result.bytes_total == 4 * 3 * (2 * (model + HEADER_BYTES) + SCALAR_BYTES)


def test_fedavg_simulated_time_follows_the_cost_model():
    """One round, one device: broadcast + train + upload, all from the cost model."""
    sc = digits_scenario({"name": "fedavg", "rounds": 1}, n=1, kind="complete", servers=True,
                         devices={"flops_per_s": 1.0e6, "uplink_bps": 1.0e9, "downlink_bps": 1.0e9})
    result = p2pfl.run(sc, write=False)
    model = _model_bytes(16)
    fwd = 2 * 64 * 16 + 16 + 16 + 2 * 16 * 10 + 10  # linear1 + relu + linear2
    train_s = 3 * fwd * 40 / 1.0e6
    down = 8 * (model + HEADER_BYTES) / 5.0e7 + 0.02
    up = 8 * (model + HEADER_BYTES + SCALAR_BYTES) / 5.0e7 + 0.02
    assert result.compute_flops_total == 3 * fwd * 40
    assert result.sim_time_s == pytest.approx(down + train_s + up, rel=1e-12)


def test_select_clients_draws_the_fraction_in_id_order_and_nothing_from_nobody():
    import numpy as np

    from p2pfl.protocols.server.fedavg import select_clients

    rng = np.random.default_rng(0)
    picked = select_clients((1, 3, 5, 7, 9, 11), 0.5, rng)
    assert len(picked) == 3 and picked == sorted(picked) and set(picked) <= {1, 3, 5, 7, 9, 11}
    assert select_clients((4, 2), 1.0, rng) == [4, 2]
    state = rng.bit_generator.state
    assert select_clients((), 0.5, rng) == [] and rng.bit_generator.state == state  # no draw from nobody
