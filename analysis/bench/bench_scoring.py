"""The clustering protocols' compute kernels on one core: the per-model loops they ran before against the batched
forms they run now. Each figure is the fastest of ``--repeat`` runs after one warm-up (robust to a loaded machine);
inputs are random (the costs do not depend on the values).

    python analysis/bench/bench_scoring.py [--only rnd | --only dac_ifca] [--repeat 3] [--sizes 4 8 16 32 64]

``rnd``: the headline fleet's RND nets on 100 Fashion-MNIST-sized images (1 x 28 x 28): the target's embedding
of a device's data, one predictor fit (30 epochs of batch 32, Adam) one by one and stacked
(``fitted_predictors``, groups of ``--sizes``), and the scoring of 99 predictors on one device's data as a
loop, in groups (``state_novelties``) and as one concatenated/grouped forward; the fastest of ``--repeat`` runs (default 3).

``dac_ifca``: per call, DAC's and IFCA's model scoring on the headline fleet's model and shard (MLP 784-32-10,
100 samples): IFCA's E-step (K = 4 cluster models), original DAC's s_ij = 1/loss (3 sampled peers, each once
a fresh probe model), DAC-cosine's similarities (7 received models); the fastest of 7 runs of 200 calls.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.clustering.rnd import (
    SCORE_GROUP,
    _grouped_novelties,
    _looped_novelties,
    fitted_predictor,
    fitted_predictors,
    make_predictor,
    make_target,
    state_novelties,
    target_embedding,
)
from p2pfl.learning.aggregate import clone_state, state_to_vector
from p2pfl.learning.clone import clone_module
from p2pfl.learning.models import MLP
from p2pfl.learning.stacked import average_losses
from p2pfl.learning.state import flatten_live_, live_state, load_state_
from p2pfl.learning.train import average_loss
from p2pfl.metrics.measured import best_of
from p2pfl.metrics.tables import markdown_table
from p2pfl.protocols.serverless.dac import cosine_similarities
from p2pfl.seeding import torch_generator

SHAPE = (1, 28, 28)
N_SAMPLES = 100


# ------------------------------------------------------------------------------------------ RND
def embedding_rows(x: torch.Tensor, repeat: int) -> list[tuple[str, str]]:
    target = make_target(SHAPE, seed=0)
    plain = copy.deepcopy(target)
    first = nn.Conv2d(1, target[0].out_channels, 3, padding=1)
    first.load_state_dict(target[0].state_dict())
    plain[0], plain[2] = first, nn.MaxPool2d(2)
    with torch.no_grad():
        rows = [("target embedding, nn.Conv2d + max_pool2d (before)", best_of(lambda: plain(x), repeat)),
                ("target embedding, UnfoldConv2d + MaxPool2x2 (after)", best_of(lambda: target_embedding(target, x),
                                                                                 repeat))]
    return [(name, f"{s * 1e3:.1f} ms") for name, s in rows]


def fit_rows(xs: torch.Tensor, fxs: torch.Tensor, repeat: int, sizes: list[int]) -> list[tuple[str, str]]:
    def calls(m: int) -> list[tuple[Any, ...]]:
        return [(make_predictor(SHAPE, seed=0), xs[i], fxs[i], 30, 32, 1e-3, torch_generator(0, "bench", i))
                for i in range(m)]

    out = []
    loop = best_of(lambda: [fitted_predictor(*c) for c in calls(4)], repeat) / 4
    out.append(("predictor fit (120 Adam steps), one by one", f"{loop * 1e3:.0f} ms a predictor"))
    for m in sizes:
        s = best_of(lambda m=m: fitted_predictors(calls(m)), repeat) / m
        out.append((f"predictor fit, {m} stacked", f"{s * 1e3:.0f} ms a predictor ({loop / s:.2f}x)"))
    return out


def scoring_rows(x: torch.Tensor, fx: torch.Tensor, repeat: int, m: int) -> list[tuple[str, str]]:
    predictors = [make_predictor(SHAPE, seed=i).eval() for i in range(m)]
    states = [p.state_dict() for p in predictors]
    template = make_predictor(SHAPE, seed=0).eval()
    w1 = torch.cat([p[0].weight for p in predictors]).detach()
    b1 = torch.cat([p[0].bias for p in predictors]).detach()
    w2 = torch.cat([p[3].weight for p in predictors]).detach()
    b2 = torch.cat([p[3].bias for p in predictors]).detach()

    def concatenated() -> torch.Tensor:  # first convs as one 1 -> 2m conv, second ones grouped
        h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
        return F.relu(F.conv2d(h, w2, b2, padding=1, groups=m))

    old = [copy.deepcopy(p) for p in predictors]
    for p in old:
        p[2] = nn.MaxPool2d(2)

    def before() -> list[float]:  # a predictor module per state, max_pool2d
        return [float(((p(x) - fx) ** 2).sum(dim=1).double().mean()) for p in old]

    loop = best_of(lambda: _looped_novelties(template, states, x, fx), repeat)
    grouped = best_of(lambda: state_novelties(template, states, x, fx), repeat)
    with torch.no_grad():
        cat = best_of(concatenated, repeat)
        was = best_of(before, repeat)
    rows = [(f"scoring {m} predictors, loop of modules with max_pool2d (before)", f"{was * 1e3:.0f} ms"),
            (f"scoring {m} predictors, loop of states (whole nets)", f"{loop * 1e3:.0f} ms"),
            (f"scoring {m} predictors, concatenated + grouped convolutions only", f"{cat * 1e3:.0f} ms"),
            (f"scoring {m} predictors, {SCORE_GROUP} at a time (state_novelties, whole nets, the loop's bits)",
             f"{grouped * 1e3:.0f} ms ({loop / grouped:.2f}x the loop)")]
    for g in (2, 4, 16, 32):
        s = best_of(lambda g=g: _grouped_novelties(template, states, x, fx, g), repeat)
        rows.append((f"scoring {m} predictors, {g} at a time", f"{s * 1e3:.0f} ms ({loop / s:.2f}x the loop)"))
    return rows


def rnd_table(repeat: int, sizes: list[int]) -> list[str]:
    g = torch.Generator().manual_seed(0)
    xs = torch.rand(max(sizes), N_SAMPLES, *SHAPE, generator=g)
    target = make_target(SHAPE, seed=0)
    fxs = torch.stack([target_embedding(target, x) for x in xs])
    rows = [*embedding_rows(xs[0], repeat), *fit_rows(xs, fxs, repeat, sizes), *scoring_rows(xs[0], fxs[0], repeat, 99)]
    return markdown_table(rows, [f"what (one core, {N_SAMPLES} images of 1x28x28)", "time"], align="lr")


# ------------------------------------------------------------------------------------------ DAC and IFCA
def dac_ifca_table(repeat: int = 7, calls: int = 200) -> list[str]:
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
    kernels = [("IFCA E-step, K = 4", estep_loop, lambda: average_losses(own, states[1:5], x, y)),
               ("DAC original s_ij, 3 peers", probe_loop, lambda: average_losses(own, states[1:4], x, y)),
               ("DAC cosine, 7 received", cosine_loop, lambda: cosine_similarities(states[0], states[1:8]))]
    rows = []
    for name, before, now in kernels:
        b, n = (1e6 * best_of(fn, repeat, calls) for fn in (before, now))
        rows.append([name, f"{b:.0f}", f"{n:.0f}", f"{b / n:.2f}"])
    return markdown_table(rows, ["scoring", "before us", "now us", "x"], align="lrrr")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["rnd", "dac_ifca"], help="one table (default: both)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per RND figure (DAC and IFCA: 7 of 200 calls)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64], help="RND predictors fitted at once")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tables = []
    if args.only in (None, "rnd"):
        tables.append(rnd_table(args.repeat, args.sizes))
    if args.only in (None, "dac_ifca"):
        tables.append(dac_ifca_table())
    print("\n\n".join("\n".join(t) for t in tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
