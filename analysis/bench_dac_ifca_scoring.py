"""Per-call cost of DAC's and IFCA's model scoring: the per-model loops they ran before, against now.

The headline fleet's model and shard (MLP 784-32-10, 100 samples): IFCA's E-step (K = 4 cluster models),
original DAC's s_ij = 1/loss (3 sampled peers, each once a fresh probe model), DAC-cosine's similarities
(7 received models). One torch thread; each figure is the fastest of 7 repeats (robust to a loaded machine).

    python analysis/bench_dac_ifca_scoring.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from p2pfl.learning.aggregate import clone_state, state_to_vector
from p2pfl.learning.clone import clone_module
from p2pfl.learning.models import MLP
from p2pfl.learning.stacked import average_losses
from p2pfl.learning.state import flatten_live_, live_state, load_state_
from p2pfl.learning.train import average_loss
from p2pfl.protocols.serverless.dac import cosine_similarities


def fastest_us(fn: Callable[[], object], calls: int = 200, repeats: int = 7) -> float:
    """Fastest mean time of one call over ``repeats`` runs of ``calls`` calls, in microseconds."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = [MLP(784, 10, hidden=32) for _ in range(9)]
    for m in models:
        flatten_live_(m)
    states = [clone_state(live_state(m)) for m in models]
    own = models[0]
    x, y = torch.randn(100, 1, 28, 28), torch.randint(0, 10, (100,))

    def estep_loop() -> list[float]:  # IFCA before: load each cluster model into the work model, score it
        out = []
        for s in states[1:5]:
            load_state_(own, s)
            out.append(average_loss(own, x, y))
        return out

    def probe_loop() -> list[float]:  # DAC original before: a fresh probe model (ctx.new_model) per sampled peer
        out = []
        for s in states[1:4]:
            probe = clone_module(own)
            flatten_live_(probe)
            load_state_(probe, s)
            out.append(average_loss(probe, x, y))
        return out

    def cosine_loop() -> list[float]:  # DAC cosine before: one dot product and two norms per received model
        a = state_to_vector(states[0])
        return [float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))
                for b in (state_to_vector(s) for s in states[1:8])]

    assert estep_loop() == average_losses(own, states[1:5], x, y)  # the same bits on this machine
    rows = [("IFCA E-step, K = 4", estep_loop, lambda: average_losses(own, states[1:5], x, y)),
            ("DAC original s_ij, 3 peers", probe_loop, lambda: average_losses(own, states[1:4], x, y)),
            ("DAC cosine, 7 received", cosine_loop, lambda: cosine_similarities(states[0], states[1:8]))]
    print("| scoring | before us | now us | x |")
    print("|---|---:|---:|---:|")
    for name, before, now in rows:
        b, n = fastest_us(before), fastest_us(now)
        print(f"| {name} | {b:.0f} | {n:.0f} | {b / n:.2f} |")


if __name__ == "__main__":
    main()
