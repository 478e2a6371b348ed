"""Device profiles: fixed values or seeded distributions, validated like every config block."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfl.errors import ConfigError
from p2pfl.sim.profiles import DeviceProfilesSpec, draw_profiles
from p2pfl.validation import parse_model


def test_fixed_values_apply_to_every_device():
    spec = DeviceProfilesSpec(flops_per_s=2e9, uplink_bps=1e7, downlink_bps=5e7)
    profiles = draw_profiles(spec, 3, np.random.default_rng(0))
    assert [(p.flops_per_s, p.uplink_bps, p.downlink_bps) for p in profiles] == [(2e9, 1e7, 5e7)] * 3


def test_distributions_are_drawn_from_the_given_stream():
    spec = parse_model(DeviceProfilesSpec, {"flops_per_s": {"dist": "lognormal", "median": 1e9, "sigma": 0.5},
                                            "uplink_bps": {"dist": "choice", "values": [1e6, 1e8], "p": [0.25, 0.75]},
                                            "downlink_bps": {"dist": "uniform", "low": 1e7, "high": 2e7}}, "t")
    a = draw_profiles(spec, 4000, np.random.default_rng(1))
    b = draw_profiles(spec, 4000, np.random.default_rng(1))
    assert a == b
    flops = np.array([p.flops_per_s for p in a])
    assert np.median(flops) == pytest.approx(1e9, rel=0.05)
    assert np.std(np.log(flops)) == pytest.approx(0.5, rel=0.05)
    up = np.array([p.uplink_bps for p in a])
    assert set(up) == {1e6, 1e8} and np.mean(up == 1e6) == pytest.approx(0.25, abs=0.03)
    down = np.array([p.downlink_bps for p in a])
    assert down.min() >= 1e7 and down.max() <= 2e7


@pytest.mark.parametrize("bad,pattern", [
    ({"uplink_bps": {"dist": "choice", "values": [1e6, 1e8], "p": [0.5, 0.6]}}, r"p must be non-negative and sum to 1"),
    ({"flops_per_s": {"dist": "uniform", "low": 5.0, "high": 1.0}}, r"high must be >= low"),
    ({"flops_per_s": -1.0}, r"field 'devices\.flops_per_s"),
    ({"flops_per_s": {"dist": "gamma"}}, r"devices\.flops_per_s"),
])
def test_bad_profiles_are_one_line_config_errors(bad, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_model(DeviceProfilesSpec, bad, "s.yaml", prefix="devices")
