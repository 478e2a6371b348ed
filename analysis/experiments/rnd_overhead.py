"""Clustering-phase cost of RND versus IFCA (RND clustered-FL paper, Fig. 3), on Fashion-MNIST.

Setup: k = 4 feature-skew groups x 3 devices (pattern mode, RMS 0.5, 300 training samples per device),
the same data as ``scenarios/rnd/fmnist_feature_skew.yaml``.

* RND clustering phase, per device: train the predictor (``rnd_epochs`` epochs of Adam, batch 32), then
  score all N predictors on the local training inputs. The target embeds a device's data once per run
  (a pure function of the target seed and the data), so re-clustering repeats the fit and the scoring only.
* IFCA clustering phase, per device and round: evaluate the K = 4 cluster models on the local training
  data (forward passes only). Task model: torchvision ResNet-18 (random init, no download), adapted to
  1 x 28 x 28 as for CIFAR: first conv 3x3 stride 1 with 1 input channel, no max-pool.

Two measures:

* modelled FLOPs from ``p2pfl.sim.cost.forward_flops_per_sample`` (counts conv, linear, BatchNorm,
  ReLU, pooling; the 8 residual additions of ResNet-18 are not modules and are added here by hand)
  and ``p2pfl.clustering.rnd_flops``;
* measured machine time: ``time.perf_counter`` around the real work, one torch thread. RND is timed on
  every device. IFCA is timed on ``--ifca-devices`` devices and scaled by N / that number (every device
  has the same number of samples, so every device does the same work); a ResNet-18 forward at 28x28
  costs ~0.9 GFLOP per sample, and timing all 12 devices would take minutes per round here.

(i) once = one clustering phase; (ii) every round = R phases (RND re-clustering every round, IFCA's
E-step every round): the embedding once plus R x (fit + scoring) for RND, R x the E-step for IFCA,
reported from the one measured phase, not re-measured.

    python analysis/experiments/rnd_overhead.py [--rounds 10] [--ifca-devices 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from p2pfl.clustering import fit_predictor, make_predictor, make_target, novelties, rnd_flops, target_embedding
from p2pfl.data import build_federation
from p2pfl.data.schema import DataSpec
from p2pfl.learning.train import average_loss
from p2pfl.metrics.claims import ClaimRow, Declared, claims_table, differs, holds_if
from p2pfl.metrics.tables import markdown_table
from p2pfl.seeding import torch_generator
from p2pfl.sim.cost import forward_flops_per_sample

ROOT = Path(__file__).resolve().parents[2]
K, PER_GROUP, SAMPLES, RMS = 4, 3, 300, 0.5
RND_EPOCHS, RND_BATCH = 30, 32


#: Fig. 3's claim, read before the run: in the most conservative schedule (RND re-clustered every round) RND's
#: clustering costs "about one order of magnitude" less than IFCA's: IFCA / RND >= 10^0.5 (nearer ten than one on a
#: log scale), in wall time and in modelled FLOPs alike.
FIG3_RATIO = 10 ** 0.5
DECLARED = Declared({"fig3": differs("Fashion-MNIST (1 x 28 x 28), N = 12, ResNet-18 with a CIFAR stem for IFCA, on a "
                                     "2-core CPU here; the paper's CIFAR-10 on its hardware")})


def fig3_claim(wall_ratio: float, flops_ratio: float, rounds: int) -> ClaimRow:
    """The claims row of Fig. 3 from schedule (ii)'s IFCA / RND ratios."""
    return DECLARED.row("fig3", "Fig. 3: re-clustered every round, RND's clustering overhead stays about one order of "
                        "magnitude below IFCA's (IFCA / RND >= 10^0.5 in wall time and in FLOPs)",
                        "about an order of magnitude lower",
                        f"IFCA / RND over R = {rounds} rounds: {wall_ratio:.1f}x wall, {flops_ratio:.1f}x FLOPs",
                        holds_if(wall_ratio >= FIG3_RATIO and flops_ratio >= FIG3_RATIO))


def resnet18_28() -> nn.Module:
    """ResNet-18 for 1 x 28 x 28 inputs (CIFAR-style stem: 3x3 stride-1 conv, no max-pool), random init."""
    m = torchvision.models.resnet18(weights=None, num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def residual_add_flops(model: nn.Module, shape: tuple[int, ...]) -> int:
    """FLOPs of the residual additions (one add per output element of each BasicBlock)."""
    total = 0

    def hook(module, args, out):
        nonlocal total
        total += out[0].numel()

    hs = [b.register_forward_hook(hook) for b in model.modules() if isinstance(b, torchvision.models.resnet.BasicBlock)]
    with torch.no_grad():
        model.eval()(torch.zeros((1, *shape)))
    for h in hs:
        h.remove()
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="R for the every-round case")
    ap.add_argument("--ifca-devices", type=int, default=1, help="devices on which IFCA's E-step is timed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "analysis/results/rnd_overhead.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    n = K * PER_GROUP
    spec = DataSpec(dataset="fashion_mnist", samples_per_client=SAMPLES,
                    partition={"kind": "feature_skew", "n_clusters": K, "mode": "pattern", "rms": RMS})
    fed = build_federation(spec, n, seed=args.seed)
    shape = tuple(fed.input_shape)
    xs = [s.train_x for s in fed.shards]
    ys = [s.train_y for s in fed.shards]

    # ---- RND: every device trains its predictor, then scores all N predictors on its data
    target = make_target(shape, seed=args.seed)
    predictors, fxs, rnd_wall, embed_wall = [], [], 0.0, 0.0
    for i, x in enumerate(xs):  # each device embeds its data once, then fits its predictor
        t = time.perf_counter()
        fxs.append(target_embedding(target, x))
        embed_wall += time.perf_counter() - t
        t = time.perf_counter()
        p = make_predictor(shape, seed=args.seed)
        fit_predictor(p, x, fxs[-1], epochs=RND_EPOCHS, batch_size=RND_BATCH,
                      generator=torch_generator(args.seed, "rnd.shuffle", i, 1))
        rnd_wall += time.perf_counter() - t
        predictors.append(p)
    for x, fx in zip(xs, fxs):
        t = time.perf_counter()
        novelties(predictors, x, fx)
        rnd_wall += time.perf_counter() - t
    embed_fl = sum(rnd_flops(shape, int(x.shape[0]), embed=True, epochs=0, n_scored=0) for x in xs)
    phase_fl = sum(rnd_flops(shape, int(x.shape[0]), embed=False, epochs=RND_EPOCHS, n_scored=n) for x in xs)
    rnd_fl = embed_fl + phase_fl

    # ---- IFCA: every device evaluates the K cluster models on its training data
    torch.manual_seed(args.seed)  # torchvision initialises from the global generator; values do not affect cost
    models = [resnet18_28() for _ in range(K)]
    fwd_layers = forward_flops_per_sample(models[0], shape)
    fwd = fwd_layers + residual_add_flops(models[0], shape)
    ifca_fl = sum(K * fwd * int(x.shape[0]) for x in xs)
    timed = min(args.ifca_devices, n)
    t = time.perf_counter()
    for i in range(timed):
        for m in models:
            average_loss(m, xs[i], ys[i], batch_size=100)
    ifca_wall = (time.perf_counter() - t) * n / timed

    R = args.rounds
    schedules = [  # (what, RND wall s, IFCA wall s, RND FLOPs, IFCA FLOPs)
        ("one phase (RND once vs one IFCA E-step)", embed_wall + rnd_wall, ifca_wall, rnd_fl, ifca_fl),
        (f"(i) R = {R} rounds, RND once, IFCA every round", embed_wall + rnd_wall, R * ifca_wall, rnd_fl,
         R * ifca_fl),
        (f"(ii) R = {R} rounds, RND every round, IFCA every round", embed_wall + R * rnd_wall, R * ifca_wall,
         embed_fl + R * phase_fl, R * ifca_fl),
    ]
    rows = [[what, f"{rw:.2f}", f"{iw:.2f}", f"{iw / rw:.1f}", f"{rf / 1e9:.2f}", f"{ifl / 1e9:.1f}", f"{ifl / rf:.1f}"]
            for what, rw, iw, rf, ifl in schedules]
    lines = [
        "# Clustering-phase overhead: RND vs IFCA (RND paper Fig. 3), Fashion-MNIST, 4 groups x 3 devices",
        "",
        f"Command: `python analysis/experiments/rnd_overhead.py --rounds {R} --ifca-devices {args.ifca_devices} --seed {args.seed}`"
        " (one torch thread, CPU).",
        "",
        f"Data: feature skew, pattern RMS {RMS}, {SAMPLES} training samples per device, N = {n}. "
        f"RND: predictor {RND_EPOCHS} epochs, batch {RND_BATCH}, scoring all {n} predictors. IFCA: K = {K} "
        f"ResNet-18 (1x28x28, CIFAR stem) evaluated on each device's training data. "
        f"ResNet-18 forward: {fwd / 1e9:.3f} GFLOP/sample ({fwd_layers:,} from layers incl. BatchNorm, ReLU, "
        f"pooling + {fwd - fwd_layers:,} residual adds). IFCA wall time measured on {timed} device(s), "
        f"scaled x{n / timed:g}. Over R rounds each phase is repeated R times (multiplied, not re-measured), "
        f"except RND's target embedding, computed once per run ({embed_wall:.2f} s, {embed_fl / 1e9:.2f} GFLOP "
        "of the phase). Wall seconds are noisy on a shared 2-core machine.",
        "",
        *markdown_table(rows, ["schedule", "RND wall s", "IFCA wall s", "IFCA/RND (wall)", "RND GFLOP", "IFCA GFLOP",
                               "IFCA/RND (FLOPs)"]),
        "",
        "## Claims",
        "",
        "The verdict as computed from schedule (ii), beside how this measurement differs from the paper's (declared "
        "in this script before the run).",
        "",
        *claims_table([fig3_claim(schedules[2][2] / schedules[2][1], schedules[2][4] / schedules[2][3], R)]),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
