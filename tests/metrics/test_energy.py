"""The devices' energy account: the formula, its constants in the device profile, and summary.json's block."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.errors import ConfigError
from p2pfl.metrics.energy import EnergyModel, device_energy_j, energy_summary
from p2pfl.metrics.recorder import Recorder
from p2pfl.sim.cost import HEADER_BYTES
from p2pfl.sim.network import Message, Network
from p2pfl.sim.profiles import DeviceProfilesSpec, draw_profiles
from p2pfl.topology import Link
from p2pfl.validation import parse_model
from tests.helpers import digits_scenario


def _model(send, receive, flop) -> EnergyModel:
    return EnergyModel(send_j_per_bit=tuple(send), receive_j_per_bit=tuple(receive), j_per_flop=tuple(flop))


# --- the formula -------------------------------------------------------------------------------

def test_joules_of_a_hand_computed_fleet():
    # Powers of two keep the arithmetic exact.
    # device 0: 8 * 10 B * 0.5 J/bit + 8 * 4 B * 0.25 J/bit = 40 + 8 = 48 J radio; 16 FLOPs * 0.125 = 2 J
    # device 1: 8 * 1 B * 1.0 + 8 * 2 B * 0.5 = 8 + 8 = 16 J radio; 0 FLOPs = 0 J
    model = _model([0.5, 1.0], [0.25, 0.5], [0.125, 4.0])
    radio, compute = device_energy_j(model, bytes_sent=[10, 1], bytes_received=[4, 2], flops=[16, 0])
    assert radio == [48.0, 16.0]
    assert compute == [2.0, 0.0]


def test_default_constants_price_a_megabyte_and_a_gigaflop():
    spec = DeviceProfilesSpec()
    (p,) = draw_profiles(spec, 1, np.random.default_rng(0))
    model = _model([p.send_j_per_bit], [p.receive_j_per_bit], [p.j_per_flop])
    radio, compute = device_energy_j(model, bytes_sent=[10**6], bytes_received=[10**6], flops=[10**9])
    # WiFi (Huang et al. 2012): 283.17 mW/Mbps up, 137.01 mW/Mbps down -> 8e6 bits each way
    assert radio == [pytest.approx(8e6 * 283.17e-3 / 1e6 + 8e6 * 137.01e-3 / 1e6, rel=1e-12)]
    assert compute == [pytest.approx(0.1, rel=1e-12)]  # 1e-10 J/FLOP


def test_summary_block_adds_relayed_bytes_to_reception_and_reports_mean_and_max():
    model = _model([0.5, 0.5, 0.5], [0.25, 0.25, 0.25], [1.0, 2.0, 1.0])
    block = energy_summary(model, bytes_sent=[1, 2, 0], bytes_received=[0, 0, 4], bytes_relayed=[0, 2, 0],
                           flops=[1, 1, 3])
    # radio: [4, 8 + 4, 8] (device 1 relayed 2 B: received them); compute: [1, 2, 3]
    assert block["radio_j_per_node"] == [4.0, 12.0, 8.0]
    assert block["compute_j_per_node"] == [1.0, 2.0, 3.0]
    assert block["j_per_device"] == {"radio_mean": 8.0, "radio_max": 12.0, "compute_mean": 2.0, "compute_max": 3.0,
                                     "total_mean": 10.0, "total_max": 14.0}
    # a constant shared by every device is stated as the number, a drawn one as its range
    assert block["model"] == {"send_j_per_bit": 0.5, "receive_j_per_bit": 0.25,
                              "j_per_flop": {"min": 1.0, "max": 2.0}}


@pytest.mark.parametrize("model,counts,pattern", [
    (_model([1.0], [1.0], [1.0, 1.0]), {}, r"j_per_flop must have one entry per device; got 2 for 1 devices"),
    (_model([-1.0], [1.0], [1.0]), {}, r"send_j_per_bit must be >= 0 J; got -1.0"),
    (_model([1.0], [float("nan")], [1.0]), {}, r"receive_j_per_bit must be >= 0 J; got nan"),
    (_model([1.0], [1.0], [1.0]), {"flops": [1, 2]}, r"flops must have one entry per device; got 2 for 1 devices"),
])
def test_bad_inputs_are_refused_with_the_rule(model, counts, pattern):
    kwargs = {"bytes_sent": [0], "bytes_received": [0], "flops": [0], **counts}
    with pytest.raises(ValueError, match=pattern):
        device_energy_j(model, **kwargs)


# --- the constants in the device profile --------------------------------------------------------

@pytest.mark.parametrize("field", ["send_j_per_bit", "receive_j_per_bit", "j_per_flop"])
def test_a_negative_constant_is_a_config_error_naming_the_field(field):
    with pytest.raises(ConfigError, match=rf"field 'devices\.{field}'.*greater than or equal to 0"):
        parse_model(DeviceProfilesSpec, {field: -1.0e-7}, "s.yaml", prefix="devices")
    assert getattr(parse_model(DeviceProfilesSpec, {field: 0}, "s.yaml", prefix="devices"), field) == 0.0


def test_energy_constants_are_drawn_after_and_never_change_the_other_fields():
    base = {"flops_per_s": {"dist": "lognormal", "median": 1e9, "sigma": 0.5},
            "uplink_bps": {"dist": "uniform", "low": 1e6, "high": 1e8}}
    plain = draw_profiles(parse_model(DeviceProfilesSpec, base, "t"), 50, np.random.default_rng(7))
    drawn_spec = parse_model(DeviceProfilesSpec, {**base, "j_per_flop": {"dist": "choice", "values": [1e-11, 1e-10]},
                                                  "send_j_per_bit": 1e-6}, "t")
    drawn = draw_profiles(drawn_spec, 50, np.random.default_rng(7))
    fields = lambda p: (p.flops_per_s, p.uplink_bps, p.downlink_bps)
    assert [fields(p) for p in drawn] == [fields(p) for p in plain]
    assert {p.j_per_flop for p in drawn} == {1e-11, 1e-10}
    assert {p.send_j_per_bit for p in drawn} == {1e-6}
    assert {p.receive_j_per_bit for p in plain} == {1.3701e-7}


# --- what the Recorder counts as received --------------------------------------------------------

def test_a_relay_is_charged_reception_of_what_it_forwards(env):
    # Line 0-1-2, a routed message 0 -> 2: node 1 receives it and sends it on; only node 2 is its destination.
    rec = Recorder(3)
    links = {(0, 1): Link(0.1, 8e6, 0.0), (1, 2): Link(0.2, 8e6, 0.0)}
    net = Network(env, links, {n: float("inf") for n in range(3)}, {n: float("inf") for n in range(3)},
                  lambda n: np.random.default_rng(n), lambda what, msg, u, v, **kw: rec.message(what, msg, u, v,
                                                                                              env.now, **kw))
    net.send(0, 2, "m", {"x": torch.zeros(1000 - HEADER_BYTES, dtype=torch.uint8)}, routed=True)
    env.run()
    assert rec.bytes_sent == [1000, 1000, 0]
    assert rec.bytes_received == [0, 0, 1000]
    assert rec.bytes_relayed == [0, 1000, 0]


def test_a_relay_that_cannot_forward_still_received_the_message():
    rec = Recorder(3)
    msg = Message(src=0, dst=2, kind="m", payload=None, size_bytes=500)
    rec.message("drop", msg, 1, 2, 1.0, reason="link_down", transmitted=False)  # at relay 1, before transmitting
    rec.message("drop", Message(0, 2, "m", None, 70), 0, 2, 1.0, reason="no_route", transmitted=False)  # at source
    assert rec.bytes_relayed == [0, 500, 0] and rec.bytes_sent == [0, 0, 0]


# --- end to end ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_summary_energy_is_the_formula_on_its_own_counts_and_leaves_the_rest_unchanged():
    sc = digits_scenario({"name": "gossip", "rounds": 2}, n=3)
    default = p2pfl.run(sc, write=False).summary
    sc["devices"] = {"send_j_per_bit": 1.0e-6, "receive_j_per_bit": 2.0e-7, "j_per_flop": 3.0e-11}
    s = p2pfl.run(sc, write=False).summary

    assert {k: v for k, v in s.items() if k != "energy"} == {k: v for k, v in default.items() if k != "energy"}
    assert s["bytes_relayed_per_node"] == [0, 0, 0]  # gossip talks to neighbours only
    assert min(s["bytes_per_node"]) > 0 and min(s["compute_flops_per_node"]) > 0
    e = s["energy"]
    assert e["model"] == {"send_j_per_bit": 1.0e-6, "receive_j_per_bit": 2.0e-7, "j_per_flop": 3.0e-11}
    radio = [8 * b * 1.0e-6 + 8 * r * 2.0e-7 for b, r in zip(s["bytes_per_node"], s["bytes_received_per_node"])]
    compute = [f * 3.0e-11 for f in s["compute_flops_per_node"]]
    assert e["radio_j_per_node"] == radio
    assert e["compute_j_per_node"] == compute
    total = [a + b for a, b in zip(radio, compute)]
    assert e["j_per_device"] == {"radio_mean": sum(radio) / 3, "radio_max": max(radio),
                                 "compute_mean": sum(compute) / 3, "compute_max": max(compute),
                                 "total_mean": sum(total) / 3, "total_max": max(total)}
    assert default["energy"]["model"] == {"send_j_per_bit": 2.8317e-7, "receive_j_per_bit": 1.3701e-7,
                                          "j_per_flop": 1.0e-10}
