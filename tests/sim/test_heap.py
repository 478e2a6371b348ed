"""The simulation's process maps model-sized buffers on their own (p2pfl.heap), so freeing them gives the
memory back; results do not change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.heap import mmapped_bytes

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(mmapped_bytes() is None, reason="needs glibc (mallinfo2): another C library")

# In a fresh process: where 200 model-sized buffers (the headline MLP's 25,450 floats) land before and after a
# Simulation is built, and what freeing them gives back. (Free heap chunks that fit still serve some of them.)
PROBE = """
import json, torch
from p2pfl.config import load
from p2pfl.heap import mmapped_bytes
from p2pfl.sim.kernel import Simulation

def probe():
    a = mmapped_bytes(); ts = [torch.zeros(25450) for _ in range(200)]; b = mmapped_bytes(); del ts
    return b - a, mmapped_bytes() - a

before = probe()
sim = Simulation(load("scenarios/quickstart.yaml", overrides=["protocol.rounds=1"]))
after = probe()
summary = sim.run(); sim.close()
print(json.dumps({"before": before, "after": after, "accuracy": summary["accuracy_per_node"]}))
"""


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_simulation_maps_model_sized_buffers_on_their_own_and_unmaps_them_when_freed() -> None:
    first = _probe()
    assert first["before"] == [0, 0]  # glibc's default: 101.8 kB blocks come from the heap
    mapped, left = first["after"]
    assert 150 * 102_400 <= mapped <= 200 * 102_400 and left == 0  # own pages (25 each), given back on free
    assert _probe()["accuracy"] == first["accuracy"]  # same bits in another process
