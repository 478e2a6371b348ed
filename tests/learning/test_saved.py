"""save_models: final -> models.npz (p2pfl.learning.saved): each device's model as last scored, equal states once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import p2pfl
from p2pfl.config import load_dict
from p2pfl.errors import ConfigError, DataError
from p2pfl.learning.saved import MODELS_FILE, load_models, pack_models
from p2pfl.sim.kernel import Simulation
from tests.helpers import digits_scenario


def test_models_file_keeps_each_distinct_state_once_with_its_dtypes(tmp_path):
    a = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([3], dtype=np.int64)}
    b = {"w": a["w"] + 1, "n": a["n"].copy()}
    path = tmp_path / MODELS_FILE
    path.write_bytes(pack_models({0: (4, a), 1: (4, {k: v.copy() for k, v in a.items()}), 3: (None, b)}, 5))
    saved = load_models(path)
    assert len(saved.states) == 2  # devices 0 and 1 hold equal states: written once
    assert saved.device_model.tolist() == [0, 0, -1, 1, -1] and saved.device_round.tolist() == [4, 4, -1, -1, -1]
    assert saved.of(2) is None and saved.of(3)["n"].dtype == torch.int64
    assert torch.equal(saved.of(1)["w"], torch.from_numpy(a["w"])) and torch.equal(saved.of(3)["w"], torch.from_numpy(b["w"]))


def test_a_bad_models_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a models file") as e:
        load_models(bad)
    assert "\n" not in str(e.value)
    np.savez(bad, device_model=np.array([0]), device_round=np.array([1]), weights=np.zeros(2))
    with pytest.raises(DataError, match=r"unexpected entry 'weights'"):
        load_models(bad)
    np.savez(bad, device_model=np.array([1]), device_round=np.array([1]), **{"state0.w": np.zeros(2)})
    with pytest.raises(DataError, match="name states it does not hold"):
        load_models(bad)


def test_a_run_saves_the_models_its_last_scores_came_from(tmp_path):
    sc = digits_scenario({"name": "gossip", "rounds": 2}, save_models="final")
    run = p2pfl.run(sc, out=tmp_path / "run")
    saved = load_models(tmp_path / "run" / MODELS_FILE)
    assert saved.device_round.tolist() == [2] * 6 and len(saved.states) == 6  # gossip: six models of their own
    sim = Simulation(load_dict(sc))
    try:
        model = sim.new_model()
        for d, shard in enumerate(sim.federation.shards):
            model.load_state_dict(saved.of(d))
            with torch.no_grad():
                acc = float((model(shard.test_x).argmax(1) == shard.test_y).double().mean())
            assert acc == pytest.approx(run.summary["accuracy_per_node"][d], abs=1e-6)  # a miscount moves it 1/n
    finally:
        sim.close()
    fedavg = p2pfl.run(digits_scenario({"name": "fedavg", "rounds": 1}, servers=True, save_models="final"),
                       out=tmp_path / "fedavg")
    assert len(load_models(tmp_path / "fedavg" / MODELS_FILE).states) == 1  # the server's model, once
    assert fedavg.summary["rounds"] == 1
    p2pfl.run(digits_scenario({"name": "gossip", "rounds": 1}), out=tmp_path / "plain")
    assert not (tmp_path / "plain" / MODELS_FILE).exists()


def test_save_models_needs_the_event_engine():
    sc = digits_scenario({"name": "gossip", "rounds": 1}, save_models="final", engine="tensor")
    with pytest.raises(ConfigError, match="save_models: final needs engine: events"):
        load_dict(sc)


def test_an_entry_declaring_more_than_it_holds_is_refused_before_it_is_read(tmp_path):
    import io
    import zipfile

    path = tmp_path / MODELS_FILE
    path.write_bytes(pack_models({0: (1, {"w": np.zeros(4, dtype=np.float32)})}, 1))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**9,)})
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("state0.big.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\x00" * 16)
    with pytest.raises(DataError, match=r"entry 'state0.big.npy' declares 4000000000 bytes and holds"):
        load_models(path)
