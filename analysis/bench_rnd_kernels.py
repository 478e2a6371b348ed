"""RND's compute, piece by piece, on one core: what a device's discovery costs and the forms measured for it.

The headline fleet's RND nets on 100 Fashion-MNIST-sized images (1 x 28 x 28): the target's
embedding of a device's data, one predictor fit (30 epochs of batch 32, Adam) one by one and
stacked (``fitted_predictors``, groups of 4 to 64), and the scoring of 99 predictors on one
device's data as a loop (``state_novelties``) and as one concatenated/grouped forward. Each figure
is the minimum over ``--repeat`` runs (random inputs: the costs do not depend on the values).

    python analysis/bench_rnd_kernels.py
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.clustering.rnd import (
    fitted_predictor,
    fitted_predictors,
    make_predictor,
    make_target,
    state_novelties,
    target_embedding,
)
from p2pfl.seeding import torch_generator

SHAPE = (1, 28, 28)
N_SAMPLES = 100


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """Seconds: the minimum over ``repeat`` runs, after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


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

    loop = best_of(lambda: state_novelties(template, states, x, fx), repeat)
    with torch.no_grad():
        cat = best_of(concatenated, repeat)
        was = best_of(before, repeat)
    return [(f"scoring {m} predictors, loop of modules with max_pool2d (before)", f"{was * 1e3:.0f} ms"),
            (f"scoring {m} predictors, loop (state_novelties, whole nets)", f"{loop * 1e3:.0f} ms"),
            (f"scoring {m} predictors, concatenated + grouped convolutions only", f"{cat * 1e3:.0f} ms")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    m = max(args.sizes)
    xs = torch.rand(m, N_SAMPLES, *SHAPE, generator=g)
    target = make_target(SHAPE, seed=0)
    fxs = torch.stack([target_embedding(target, x) for x in xs])
    rows = [*embedding_rows(xs[0], args.repeat), *fit_rows(xs, fxs, args.repeat, args.sizes),
            *scoring_rows(xs[0], fxs[0], args.repeat, 99)]
    print(f"| what (one core, {N_SAMPLES} images of 1x28x28) | time |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
