"""Random Network Distillation (Burda et al. 2018) as a data-novelty probe.

RND clustered-FL paper, Sec. "Random Network Distillation" and Sec. IV
(novelty-driven federation discovery): a frozen, randomly initialised target
network ``f`` embeds inputs; a small predictor ``f_hat`` is trained on local
data to imitate it; the novelty of ``x`` under ``f_hat`` is

    u(x) = || f_hat(x) - f(x) ||^2        (sum over the 64 embedding outputs)

and the score of device ``j``'s predictor on device ``i``'s data is
``s_ij = mean_{x in B_i} u_j(x)``.

Architectures follow the authors' public experiment code
(``domm99/experiments-2026-uncertainty-based-clustered-fl``,
``src/learning/__init__.py``), which keeps a 2x2 max-pool after the first
convolution:

* image target, ``(C, H, W)`` inputs::

    Conv(C->32, 3, pad 1) - ReLU - MaxPool(2) - Conv(32->64, 3, pad 1) - ReLU
    - AdaptiveAvgPool(4x4) - Flatten - Linear(64*16 -> 64)

* image predictor: the same with 2 and 4 channels, ending in
  ``Linear(4*16 -> 64)``;
* vector target, ``(D,)`` inputs: ``Linear(D->128) - ReLU - Linear(128->64)``;
* vector predictor: ``Linear(D->16) - ReLU - Linear(16->64)``.

Every Conv/Linear weight is Kaiming-normal (ReLU gain), biases zero. Training
uses Adam (lr 1e-3), 10 epochs, batch 128; images are expected in [0, 1].
The target is a pure function of its seed, so only predictors ever travel.

The target is frozen and a device's data never changes, so a device embeds its
data once (:func:`target_embedding`) and trains and scores against that
embedding (:func:`fit_predictor`, :func:`novelties`): the same numbers as
re-embedding on every call, at a fraction of the cost (the image target has
~50x the predictor's FLOPs).

The predictor's initial weights come in two kinds (``make_predictor``'s ``node``; the
protocols' ``predictor_init``). The paper (Sec. IV) has each device train "a local RND
predictor ... with respect to a shared, randomly initialized target network" and does not
say how the predictor is initialised:

* ``per_device``, what the authors' code does: ``src/Device.py`` trains each device's
  predictor with ``train_rnd_on_dataset(..., seed=seed + 10_000 + node_id)``, which calls
  ``set_seed`` on that seed before building the predictor (``src/learning/__init__.py``), so
  every device starts from its own random initialisation; the target (``create_target_rnd``,
  one per run) is shared.
  Ours draws device i's from the stream ``("rnd.predictor", i)`` of the run seed
  (:func:`p2pfl.seeding.child_seed`), not from global RNG state.
* ``shared`` (the protocols' default, and every archived result before issue 69), our
  labelled variant: every device builds the same initial predictor from the run seed, like
  a common FL initialisation. It makes recovery easier: with per-device initialisations, on
  small budgets (about 100 Adam steps on 150 digits per device) the init differences dominate
  the novelty matrix column by column and no block structure appears.

Training-step count matters as much as epochs: 10 epochs of batch 128 on a
150-sample shard are only 20 steps and leave the predictor near its init.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping, Sequence
from functools import lru_cache
from numbers import Integral, Real
from typing import Any, Optional, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from p2pfl.executors.jobs import stacks
from p2pfl.seeding import child_seed
from p2pfl.sim.cost import forward_flops_per_sample, train_flops

__all__ = [
    "EMBEDDING_DIM",
    "TARGET_CHANNELS",
    "PREDICTOR_CHANNELS",
    "TARGET_HIDDEN",
    "PREDICTOR_HIDDEN",
    "POOL_SIZE",
    "MaxPool2x2",
    "UnfoldConv2d",
    "UNFOLD_ATOL",
    "make_target",
    "make_predictor",
    "target_embedding",
    "fit_predictor",
    "fitted_predictor",
    "fitted_predictors",
    "STACK_ATOL",
    "STACK_LIMIT",
    "train_predictor",
    "novelty",
    "novelties",
    "state_novelties",
    "novelty_row",
    "novelty_matrix",
    "rnd_flops",
    "predictor_state_bytes",
]

#: Size of the RND embedding (authors' ``RND_EMBEDDING_DIM``).
EMBEDDING_DIM = 64
#: Channels of the two target convolutions.
TARGET_CHANNELS = (32, 64)
#: Channels of the two predictor convolutions.
PREDICTOR_CHANNELS = (2, 4)
#: Hidden width of the vector (MLP) target.
TARGET_HIDDEN = 128
#: Hidden width of the vector (MLP) predictor.
PREDICTOR_HIDDEN = 16
#: Side of the adaptive average pool before the final linear layer.
POOL_SIZE = 4

_EVAL_BATCH = 1024
#: Tolerance of ``UnfoldConv2d`` against ``nn.Conv2d`` (absolute; it measured 0 on every input tried).
UNFOLD_ATOL = 1e-5
#: Predictor fits trained as one stacked model by the batched executor: at most this many (one core, quiet,
#: 30 epochs of batch 32 on 100 images, analysis/bench/bench_scoring.py: 302 ms a predictor one by one; stacked
#: 4 / 8 / 16 / 32 / 64 at a time, 217 / 195 / 150 / 146 / 155 ms; larger groups' maps leave the cache).
STACK_LIMIT = 16
#: Tolerance of a stacked fit's weights against ``fitted_predictor``'s (absolute, after 120 Adam steps; tested).
STACK_ATOL = 1e-4
#: Predictors scored as one group by ``_grouped_novelties`` (not the path scores take: ``state_novelties``) on
#: images of one channel: at most this many, and as
#: many as keep the group's first maps within ``SCORE_GROUP_BYTES``. Measured (one core, quiet, ms a predictor,
#: analysis/bench/bench_scoring.py): 100 images of 1 x 28 x 28, one by one 1.24, in groups of 4 / 8 / 12 / 16 / 24,
#: 0.70 / 0.67 / 0.68 / 0.79 / 0.92; 300 images, 3.04, groups of 1 / 2 / 4 / 8, 2.18 / 2.06 / 2.13 / 2.27;
#: 1,000 images, 11.8, groups of 1 / 2 / 4 / 8, 6.9 / 7.1 / 8.6 / 9.9. Since then the relu follows the max-pool:
#: 0.66 (100 images, the default group).
SCORE_GROUP = 8
SCORE_GROUP_BYTES = 5 * 2**20


# --------------------------------------------------------------------------- networks


def _arch(in_shape: int | Sequence[int]) -> tuple[str, int]:
    """``("conv", C)`` for a channel count or ``(C, H, W)``; ``("mlp", D)`` for ``(D,)``."""
    if isinstance(in_shape, Integral) and not isinstance(in_shape, bool):
        if in_shape < 1:
            raise ValueError(f"The 'in_shape' parameter must be a channel count >= 1; got {in_shape!r} instead")
        return "conv", int(in_shape)
    shape = _full_shape(in_shape)  # type: ignore[arg-type]  # not an int here (numbers.Integral is opaque to mypy)
    return ("conv", shape[0]) if len(shape) == 3 else ("mlp", shape[0])


def _full_shape(in_shape: Sequence[int]) -> tuple[int, ...]:
    """Validate a per-sample shape ``(C, H, W)`` or ``(D,)``."""
    try:
        shape = tuple(int(s) for s in in_shape)
    except TypeError:
        raise TypeError(f"The 'in_shape' parameter must be a tuple of ints; got {in_shape!r} instead") from None
    if len(shape) not in (1, 3) or any(s < 1 for s in shape):
        raise ValueError(f"The 'in_shape' parameter must be (C, H, W) or (D,) with positive sizes; got {in_shape!r} instead")
    return shape


class MaxPool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)`` that, under ``torch.no_grad``, takes the maximum of the four strided 2x2 views.

    The same values as ``max_pool2d``. Measured on one core: ``max_pool2d``'s CPU kernel took
    0.49 ms on a predictor's first map for 100 images, the four views 0.09 ms (a scoring forward
    1.34 -> 0.95 ms; the target's embedding gains more, 32 channels). Under autograd (training)
    it is ``max_pool2d``, whose backward costs less than the views' (their slices' backward
    zero-fills whole maps).
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2  # floor, as max_pool2d
        x = x[..., :h, :w]
        return torch.maximum(torch.maximum(x[..., 0::2, 0::2], x[..., 0::2, 1::2]),
                             torch.maximum(x[..., 1::2, 0::2], x[..., 1::2, 1::2]))


class UnfoldConv2d(nn.Conv2d):
    """``nn.Conv2d`` (3x3, padding 1) that, under ``torch.no_grad``, is one batched matmul over the
    unfolded patches.

    For the target's first convolution (1 -> 32 channels on 28x28): measured on one core, the CPU
    kernel took 12-17 ms for 100 Fashion-MNIST images, the matmul 3.5 ms; the values agreed bit for
    bit on every input tried (tested within ``UNFOLD_ATOL``). Under autograd it is ``nn.Conv2d``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        n, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, padding=cast(tuple[int, int], self.padding))  # (N, C*9, H*W)
        weight = self.weight.reshape(1, self.out_channels, -1).expand(n, -1, -1)
        assert self.bias is not None
        return torch.baddbmm(self.bias.reshape(1, -1, 1), weight, cols).reshape(n, self.out_channels, h, w)


def _conv_net(in_channels: int, channels: tuple[int, int], *, unfold: bool = False) -> nn.Sequential:
    c1, c2 = channels
    return nn.Sequential(
        (UnfoldConv2d if unfold else nn.Conv2d)(in_channels, c1, 3, padding=1),
        nn.ReLU(),
        MaxPool2x2(),
        nn.Conv2d(c1, c2, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(POOL_SIZE),
        nn.Flatten(),
        nn.Linear(c2 * POOL_SIZE * POOL_SIZE, EMBEDDING_DIM),
    )


def _mlp_net(in_features: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, EMBEDDING_DIM))


def _build(in_shape: int | Sequence[int], *, seed: int, role: str, ids: tuple[int, ...] = ()) -> nn.Sequential:
    if not isinstance(seed, Integral) or isinstance(seed, bool):
        raise TypeError(f"The 'seed' parameter must be an int; got {seed!r} instead")
    kind, size = _arch(in_shape)
    if kind == "conv":
        target = role == "target"
        net = _conv_net(size, TARGET_CHANNELS if target else PREDICTOR_CHANNELS, unfold=target)
    else:
        net = _mlp_net(size, TARGET_HIDDEN if role == "target" else PREDICTOR_HIDDEN)
    # A private stream per role (and node): the same root seed gives uncorrelated target and predictors.
    g = torch.Generator()
    g.manual_seed(child_seed(int(seed), f"rnd.{role}", *ids))
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu", generator=g)
                nn.init.zeros_(m.bias)
    return net


def make_target(in_shape: int | Sequence[int], *, seed: int) -> nn.Module:
    """The frozen random target ``f`` (paper Sec. RND): same seed -> identical weights.

    ``in_shape`` is an image channel count, an image shape ``(C, H, W)`` or a
    vector shape ``(D,)``; the rank picks the CNN or the MLP variant. All
    parameters have ``requires_grad=False`` and the module is in eval mode.
    """
    net = _build(in_shape, seed=seed, role="target")
    for p in net.parameters():
        p.requires_grad_(False)
    return net.eval()


def make_predictor(in_shape: int | Sequence[int], *, seed: int, node: Optional[int] = None) -> nn.Module:
    """A fresh trainable predictor ``f_hat`` (paper Eq. 3); same seed (and node) -> identical weights.

    ``node=None``: the shared initial predictor, every device's the same (stream ``rnd.predictor``);
    ``node=i``: device i's own (stream ``rnd.predictor``, i), as the authors' code gives each device
    (see the module docstring).
    """
    if node is None:
        return _build(in_shape, seed=seed, role="predictor")
    if not isinstance(node, Integral) or isinstance(node, bool) or node < 0:
        raise ValueError(f"The 'node' parameter must be a device id (an int >= 0) or None; got {node!r} instead")
    return _build(in_shape, seed=seed, role="predictor", ids=(int(node),))


# --------------------------------------------------------------------------- training and scoring


def _first_layer(net: nn.Module) -> nn.Conv2d | nn.Linear:
    return next(m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))


def _check_input(net: nn.Module, x: torch.Tensor, *, scan: bool = True) -> torch.Tensor:
    """Check ``x`` against ``net``'s first layer (and, with ``scan``, images against [0, 1]); return it as float32."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"The 'x' parameter must be a torch.Tensor; got {type(x).__name__} instead")
    if x.shape[0] == 0:
        raise ValueError("The 'x' parameter must hold at least one sample; got 0 instead")
    first = _first_layer(net)
    if isinstance(first, nn.Conv2d):
        if x.ndim != 4 or x.shape[1] != first.in_channels:
            raise ValueError(
                f"The 'x' parameter must have shape (N, {first.in_channels}, H, W) for this CNN; "
                f"got {tuple(x.shape)} instead"
            )
        if x.shape[2] < 2 or x.shape[3] < 2:
            raise ValueError(f"Images must be at least 2x2 (the nets max-pool by 2); got {tuple(x.shape)}")
        if scan:
            lo, hi = float(x.min()), float(x.max())
            if lo < 0.0 or hi > 1.0:
                raise ValueError(f"Images must lie in [0, 1]; got values in [{lo:.4g}, {hi:.4g}]")
    elif x.ndim != 2 or x.shape[1] != first.in_features:
        raise ValueError(
            f"The 'x' parameter must have shape (N, {first.in_features}) for this MLP; got {tuple(x.shape)} instead"
        )
    return x.to(dtype=torch.float32)


def _check_pair(predictor: nn.Module, target: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Check that predictor and target take the same inputs, and ``x`` against them; return it as float32."""
    first_p, first_t = _first_layer(predictor), _first_layer(target)
    if isinstance(first_p, nn.Conv2d) != isinstance(first_t, nn.Conv2d):
        raise ValueError("predictor and target disagree on input kind (one is a CNN, the other an MLP)")
    x = _check_input(target, x)
    return _check_input(predictor, x, scan=False)


def _check_embedding(x: torch.Tensor, fx: torch.Tensor) -> None:
    if not isinstance(fx, torch.Tensor) or tuple(fx.shape) != (x.shape[0], EMBEDDING_DIM):
        got = tuple(fx.shape) if isinstance(fx, torch.Tensor) else type(fx).__name__
        raise ValueError(f"The 'fx' parameter must be the target's embedding of x, shape ({x.shape[0]}, "
                         f"{EMBEDDING_DIM}); got {got} instead (use target_embedding(target, x))")


def _check_positive_int(value: object, name: str) -> int:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"The '{name}' parameter must be an int >= 1; got {value!r} instead")
    return int(value)


@torch.no_grad()
def _embed(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    was = net.training
    net.eval()
    try:
        return torch.cat([net(x[i : i + _EVAL_BATCH]) for i in range(0, x.shape[0], _EVAL_BATCH)])
    finally:
        net.train(was)


def _per_sample_sq_error(pred: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """u(x) for each row: sum over the embedding of the squared error."""
    return (pred - tgt).pow(2).sum(dim=1)


def _data_key(net: nn.Module, x: torch.Tensor, *rest: Any) -> Hashable:
    """Calls on one architecture and data shape (grouped by the batched executor, run one by one)."""
    return (repr(net), tuple(x.shape[1:]))


@stacks(None, _data_key, 64)
def target_embedding(target: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``f(x)`` for every sample, shape ``(N, 64)``: what a device computes once for its own data.

    The target is frozen and the data fixed, so training (:func:`fit_predictor`) and every scoring
    (:func:`novelties`) reuse it; ``x`` is checked here, once.
    """
    return _embed(target, _check_input(target, x))


def fit_predictor(
    predictor: nn.Module,
    x: torch.Tensor,
    fx: torch.Tensor,
    *,
    epochs: int = 10,
    batch_size: int = 128,
    lr: float = 1e-3,
    generator: torch.Generator,
) -> float:
    """Fit ``predictor`` in place to the target's embedding ``fx`` of ``x`` (paper Eq. 3); the last epoch's loss.

    Loss per sample is ``u(x)`` (sum of squared errors over the 64 outputs),
    averaged over the batch; Adam, shuffled mini-batches drawn from
    ``generator``. The returned value is the sample-weighted mean of that loss
    over the final epoch, as the authors log it. The predictor is left in eval mode.
    """
    epochs = _check_positive_int(epochs, "epochs")
    batch_size = _check_positive_int(batch_size, "batch_size")
    if not isinstance(lr, Real) or not (float(lr) > 0.0 and np.isfinite(float(lr))):
        raise ValueError(f"The 'lr' parameter must be a finite float > 0; got {lr!r} instead")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"The 'generator' parameter must be a torch.Generator; got {type(generator).__name__} instead")
    x = _check_input(predictor, x, scan=False)
    _check_embedding(x, fx)
    opt = torch.optim.Adam(predictor.parameters(), lr=float(lr))
    n = x.shape[0]
    predictor.train()
    epoch_loss = float("nan")
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            opt.zero_grad(set_to_none=True)
            loss = _per_sample_sq_error(predictor(x[idx]), fx[idx]).mean()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        epoch_loss = total / n
    predictor.eval()
    return epoch_loss


def train_predictor(
    predictor: nn.Module,
    target: nn.Module,
    x: torch.Tensor,
    *,
    epochs: int = 10,
    batch_size: int = 128,
    lr: float = 1e-3,
    generator: torch.Generator,
) -> float:
    """Embed ``x`` with ``target``, then :func:`fit_predictor` (the same as embedding per batch: it is frozen)."""
    x = _check_pair(predictor, target, x)
    return fit_predictor(predictor, x, _embed(target, x), epochs=epochs, batch_size=batch_size, lr=lr,
                         generator=generator)


def _fit_key(predictor: nn.Module, x: torch.Tensor, fx: torch.Tensor, epochs: int, batch_size: int, lr: float,
             generator: torch.Generator) -> Hashable:
    """Fits that may train as one stacked model: one architecture, data shape and setting."""
    return (repr(predictor), tuple(x.shape), x.dtype, epochs, batch_size, float(lr))


def fitted_predictors(calls: Sequence[tuple[Any, ...]]) -> list[nn.Module]:
    """``fitted_predictor(*args)`` for each ``args`` in ``calls``, trained as one stacked model.

    The predictors' parameters are stacked on a new leading dimension and trained with
    ``torch.func.vmap`` (one forward and backward per step for the group); each keeps its own
    batch order (drawn from its own generator, as ``fit_predictor`` draws it) and its own Adam
    moments, updated with the same element-wise steps as ``torch.optim.Adam`` (defaults: betas
    0.9 / 0.999, eps 1e-8). Not bit-identical to the loop: a vmapped convolution is a grouped one,
    whose float sums are ordered differently; every weight stays within ``STACK_ATOL`` (tested).
    """
    first, x0, _, epochs, batch_size, lr, _ = calls[0]
    if len({_fit_key(*c) for c in calls}) != 1:
        raise ValueError("stacked fits must share the predictor architecture, data shape and settings")
    for _, x, fx, *_rest in calls:
        _check_embedding(_check_input(first, x, scan=False), fx)
    template = copy.deepcopy(first).train()  # its structure only: functional_call supplies the weights
    names = [name for name, _ in template.named_parameters()]
    leaves = [torch.stack([dict(c[0].named_parameters())[name].detach() for c in calls]).requires_grad_()
              for name in names]
    X = torch.stack([c[1].to(dtype=torch.float32) for c in calls])
    FX = torch.stack([c[2] for c in calls])
    rows = torch.arange(len(calls)).unsqueeze(1)

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return _per_sample_sq_error(functional_call(template, params, (x,)), fx).mean()

    losses_of = vmap(loss)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    exp_avg = [torch.zeros_like(p) for p in leaves]
    exp_avg_sq = [torch.zeros_like(p) for p in leaves]
    n, step = int(x0.shape[0]), 0
    for _ in range(epochs):
        order = torch.stack([torch.randperm(n, generator=c[6]) for c in calls])
        for start in range(0, n, batch_size):
            idx = order[:, start : start + batch_size]
            losses = losses_of(dict(zip(names, leaves)), X[rows, idx], FX[rows, idx])
            grads = torch.autograd.grad(losses.sum(), leaves)
            step += 1
            step_size = lr / (1 - beta1**step)
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            with torch.no_grad():
                for p, g, m, v in zip(leaves, grads, exp_avg, exp_avg_sq):
                    m.lerp_(g, 1 - beta1)
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    p.addcdiv_(m, (v.sqrt() / bias_correction2_sqrt).add_(eps), value=-step_size)
    out = []
    for i, c in enumerate(calls):
        predictor = copy.deepcopy(c[0])
        with torch.no_grad():
            for name, p in predictor.named_parameters():
                p.copy_(leaves[names.index(name)][i])
        out.append(predictor.eval())
    return out


@stacks(fitted_predictors, _fit_key, STACK_LIMIT)
def fitted_predictor(predictor: nn.Module, x: torch.Tensor, fx: torch.Tensor, epochs: int, batch_size: int,
                     lr: float, generator: torch.Generator) -> nn.Module:
    """``predictor`` after ``fit_predictor`` (a job's function: its value is the result; the batched
    executor may run pending fits together, see :func:`fitted_predictors`)."""
    fit_predictor(predictor, x, fx, epochs=epochs, batch_size=batch_size, lr=lr, generator=generator)
    return predictor


def novelties(predictors: Sequence[nn.Module], x: torch.Tensor, fx: torch.Tensor) -> np.ndarray:
    """``[s_1, ..., s_M]``: each predictor's mean novelty on ``x``, against the target's embedding ``fx`` of ``x``.

    One forward per predictor. Stacking the M predictors into one grouped forward was measured
    slower on CPU (99 predictors on 100 Fashion-MNIST images, one core: the concatenated first
    convolution alone, 1 -> 198 channels, took 80 ms against 40 ms for the 99 small ones, whose
    maps stay in cache; the grouped second one 65 ms against 22 ms).
    """
    x = x.to(dtype=torch.float32)
    _check_embedding(x, fx)
    out = np.empty(len(predictors), dtype=np.float64)
    for k, p in enumerate(predictors):
        _check_input(p, x, scan=False)
        out[k] = _mean_novelty(_embed(p, x), fx)
    return out


def _states_key(template: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor,
                fx: torch.Tensor) -> Hashable:
    return _data_key(template, x)


@stacks(None, _states_key, 16)
def state_novelties(template: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor,
                    fx: torch.Tensor) -> np.ndarray:
    """:func:`novelties` of predictors given as state dicts of ``template``'s architecture (as they travel).

    One predictor at a time (:func:`_looped_novelties`), each as its own module's forward. Scoring one-channel
    images in groups (:func:`_grouped_novelties`, about 1.8x faster at 100 images) gave the loop's bits on the
    machines it was measured on but not on an AMD EPYC one (up to 1e-8 apart, relative: ``nn.Conv2d`` picks its
    kernel by CPU), so a score would depend on the machine's kernels beyond the loop's own: it stays a measured
    alternative (analysis/bench/bench_scoring.py), not the path scores take.
    """
    x = _check_input(template, x, scan=False)
    _check_embedding(x, fx)
    return _looped_novelties(template, states, x, fx)


def _looped_novelties(template: nn.Module, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor,
                      fx: torch.Tensor) -> np.ndarray:
    """:func:`state_novelties` one predictor at a time: each forward runs ``template``'s layers with the
    state's weights, the same operations, so the same bits, as loading the state into a predictor."""
    out = np.empty(len(states), dtype=np.float64)
    with torch.no_grad():
        for k, state in enumerate(states):
            pred = torch.cat([_forward_with(template, state, x[i : i + _EVAL_BATCH])
                              for i in range(0, x.shape[0], _EVAL_BATCH)])
            out[k] = _mean_novelty(pred, fx)
    return out


def _scores_in_groups(template: nn.Module, x: torch.Tensor) -> bool:
    """Whether ``template`` is the image predictor (:func:`_conv_net`) on images of one channel."""
    kinds = [nn.Conv2d, nn.ReLU, MaxPool2x2, nn.Conv2d, nn.ReLU, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Linear]
    if not isinstance(template, nn.Sequential) or [type(m) for m in template] != kinds:
        return False
    first = cast(nn.Conv2d, template[0])
    return bool(x.dim() == 4 and x.shape[1] == 1 and first.in_channels == 1 and first.kernel_size == (3, 3)
                and first.stride == (1, 1) and first.padding == (1, 1) and first.dilation == (1, 1)
                and first.groups == 1 and first.padding_mode == "zeros")


@torch.no_grad()
def _grouped_novelties(template: nn.Sequential, states: Sequence[Mapping[str, torch.Tensor]], x: torch.Tensor,
                       fx: torch.Tensor, group: Optional[int] = None) -> np.ndarray:
    """:func:`state_novelties` for :func:`_scores_in_groups`, ``group`` predictors at a time (default: as
    ``SCORE_GROUP`` and ``SCORE_GROUP_BYTES`` say).

    The first convolution of every predictor in a group is one batched matmul over the device's unfolded
    images, unfolded once for all its predictors (as :class:`UnfoldConv2d`), and the elementwise layers and
    the average pool run on the group's maps at once; the second convolution and the linear layer run per
    predictor. With one input channel each output of the first convolution is the same 9-term sum as
    ``nn.Conv2d``'s, and the scores were the loop's bit for bit on the machines first measured, but not on
    every CPU (``nn.Conv2d``'s kernel is the CPU's choice): within 1e-6 of the loop, relative (tested), so
    :func:`state_novelties` runs the loop. With three channels the sums are ordered differently (1e-6 apart).
    """
    conv1, pool, conv2, avg = cast(nn.Conv2d, template[0]), template[2], cast(nn.Conv2d, template[3]), template[5]
    c1, c2 = conv1.out_channels, conv2.out_channels
    h, w = x.shape[-2:]
    if group is None:
        first_maps = min(x.shape[0], _EVAL_BATCH) * c1 * h * w * 4  # bytes, one predictor's
        group = max(1, min(SCORE_GROUP, SCORE_GROUP_BYTES // first_maps))
    errors: list[list[torch.Tensor]] = [[] for _ in states]
    for i in range(0, x.shape[0], _EVAL_BATCH):
        batch = x[i : i + _EVAL_BATCH]
        n = batch.shape[0]
        cols = F.unfold(batch, 3, padding=1)  # (n, 9, h * w): every predictor's first convolution reads it
        for start in range(0, len(states), group):
            members = states[start : start + group]
            weight = torch.cat([st["0.weight"].reshape(c1, -1) for st in members])
            bias = torch.cat([st["0.bias"] for st in members])
            maps = torch.baddbmm(bias.reshape(1, -1, 1), weight.expand(n, -1, -1), cols).reshape(n, -1, h, w)
            maps = F.relu(pool(maps))  # max and relu commute exactly: relu on a quarter of the values
            second = torch.cat([conv2._conv_forward(maps[:, k * c1 : (k + 1) * c1], st["3.weight"], st["3.bias"])
                                for k, st in enumerate(members)], dim=1)
            pooled = avg(F.relu(second))
            for k, st in enumerate(members):
                pred = F.linear(pooled[:, k * c2 : (k + 1) * c2].flatten(1), st["7.weight"], st["7.bias"])
                errors[start + k].append(_per_sample_sq_error(pred, fx[i : i + n]))
    return np.array([float(torch.cat(e).double().mean()) for e in errors], dtype=np.float64)


def _forward_with(net: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``net(x)`` with its Conv2d and Linear weights taken from ``state`` (``net`` is a plain Sequential)."""
    for name, m in net.named_children():
        if isinstance(m, nn.Conv2d):
            x = m._conv_forward(x, state[f"{name}.weight"], state[f"{name}.bias"])
        elif isinstance(m, nn.Linear):
            x = F.linear(x, state[f"{name}.weight"], state[f"{name}.bias"])
        else:
            x = m(x)
    return x


def _mean_novelty(pred: torch.Tensor, fx: torch.Tensor) -> float:
    return float(_per_sample_sq_error(pred, fx).double().mean())


def novelty(predictor: nn.Module, target: nn.Module, x: torch.Tensor) -> float:
    """``s = mean_x u(x)``: the predictor's mean novelty on the samples ``x`` (paper Eq. for s_ij)."""
    x = _check_pair(predictor, target, x)
    return float(novelties([predictor], x, _embed(target, x))[0])


def novelty_row(predictors: Sequence[nn.Module], target: nn.Module, x: torch.Tensor) -> np.ndarray:
    """Row ``i`` of the novelty matrix: ``[s_i1, ..., s_iN]``, every predictor scored on device i's ``x``.

    The target is embedded once; entry ``k`` equals ``novelty(predictors[k], target, x)`` exactly.
    """
    predictors = list(predictors)
    if not predictors:
        return np.empty(0, dtype=np.float64)
    x = _check_pair(predictors[0], target, x)
    return novelties(predictors, x, _embed(target, x))


def novelty_matrix(
    predictors: Sequence[nn.Module],
    target: nn.Module,
    xs: Sequence[torch.Tensor],
    *,
    scored: np.ndarray | None = None,
) -> np.ndarray:
    """The N x N novelty matrix ``U[i, j] = s_ij`` (predictor j on device i's data ``xs[i]``).

    ``scored`` (bool N x N, optional) marks the pairs a device actually
    evaluates (e.g. neighbours within h hops); unscored entries are ``nan``.
    The diagonal is always scored: every device scores its own predictor.
    """
    predictors = list(predictors)
    n = len(predictors)
    if len(xs) != n:
        raise ValueError(f"predictors and xs must have the same length; got {n} and {len(xs)}")
    if scored is None:
        mask = np.ones((n, n), dtype=bool)
    else:
        mask = np.asarray(scored, dtype=bool)
        if mask.shape != (n, n):
            raise ValueError(f"The 'scored' parameter must have shape ({n}, {n}); got {mask.shape} instead")
        mask = mask | np.eye(n, dtype=bool)
    U = np.full((n, n), np.nan)
    for i in range(n):
        cols = np.flatnonzero(mask[i])
        U[i, cols] = novelty_row([predictors[j] for j in cols], target, xs[i])
    return U


# --------------------------------------------------------------------------- cost model


@lru_cache(maxsize=64)
def _forward_flops(shape: tuple[int, ...]) -> tuple[int, int]:
    """Forward FLOPs per sample of (predictor, target) for an input of ``shape``."""
    p = make_predictor(shape, seed=0)
    t = make_target(shape, seed=0)
    return forward_flops_per_sample(p, shape), forward_flops_per_sample(t, shape)


def rnd_flops(in_shape: Sequence[int], n_samples: int, *, embed: bool = False, epochs: int = 0,
              n_scored: int = 0) -> int:
    """Modelled FLOPs of a step of one device's discovery on its ``n_samples`` local samples (paper Sec. V,
    "machine time").

    With ``F_p``, ``F_t`` the forward FLOPs per sample of predictor and target
    (``p2pfl.sim.cost.forward_flops_per_sample``, backward = 2 x forward)::

        embed  = n_samples * F_t                 (the target's embedding of the data; once per device per run)
        train  = n_samples * epochs * 3 * F_p    (predictor training against that embedding)
        score  = n_samples * n_scored * F_p      (n_scored predictors, the device's own included)
        total  = embed (if embed) + train + score

    A device pays the target once: it is frozen and the data fixed, so a real device keeps
    ``f(x)`` (64 floats a sample) and every later training and scoring reuses it.
    """
    shape = _full_shape(in_shape)
    n = _check_nonneg_int(n_samples, "n_samples")
    ep = _check_nonneg_int(epochs, "epochs")
    k = _check_nonneg_int(n_scored, "n_scored")
    fp, ft = _forward_flops(shape)
    return int((n * ft if embed else 0) + train_flops(fp, n * ep) + n * k * fp)


def predictor_state_bytes(in_shape: Sequence[int]) -> int:
    """Tensor bytes of a predictor's state for inputs of ``in_shape``: what an ``rnd_predictor`` message carries
    besides its header (``p2pfl.maths.messages``)."""
    return sum(t.numel() * t.element_size() for t in make_predictor(_full_shape(in_shape), seed=0).state_dict().values())


def _check_nonneg_int(value: object, name: str) -> int:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 0:
        raise ValueError(f"The '{name}' parameter must be an int >= 0; got {value!r} instead")
    return int(value)
