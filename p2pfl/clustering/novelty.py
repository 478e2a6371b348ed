"""The RND probe: a device's side of RND novelty clustering, and the novelty-matrix artifacts.

Shared by the ``rnd`` (server) and ``rnd_gossip`` (serverless) protocols, and by
``dac``'s scoring; maths from :mod:`p2pfl.clustering.rnd` (RND clustered-FL paper,
Sec. IV, Algorithm 1).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import torch
from torch import nn

from p2pfl.clustering.plots import novelty_heatmap
from p2pfl.clustering.rnd import (
    fitted_predictor,
    make_predictor,
    make_target,
    rnd_flops,
    state_novelties,
    target_embedding,
)
from p2pfl.seeding import torch_generator

if TYPE_CHECKING:  # pragma: no cover
    from p2pfl.sim.context import DeviceContext
    from p2pfl.sim.runinfo import RunInfo

__all__ = ["RNDProbe", "Predictor", "PredictorInit", "PREDICTOR_INIT_DOC", "heatmap_png", "npy_bytes",
           "novelty_artifacts", "NPY_DEVICES"]

#: A trained predictor as it travels: its state dict.
Predictor = Mapping[str, torch.Tensor]

#: Where a device's initial predictor comes from (``p2pfl.clustering.rnd``'s module docstring).
PredictorInit = Literal["shared", "per_device"]
#: The protocols' ``predictor_init`` field description (``rnd``, ``rnd_gossip``).
PREDICTOR_INIT_DOC = ("the predictors' initial weights: shared, every device's the same from the run seed (ours; "
                      "makes recovery easier); or per_device, device i's own from the run seed and i, as the "
                      "authors' code (seed + 10_000 + node_id); the target is shared either way")


class RNDProbe:
    """A device's side of RND: embed its data, train its predictor, score predictors on its data, charge the FLOPs.

    Shared by ``rnd`` and ``rnd_gossip``. Real work runs in torch; simulated time comes from
    ``rnd_flops``; ``flops`` accumulates the clustering compute. A device embeds its training
    inputs with the frozen target once per run (its first training or scoring does it, as its
    own job) and every later training and scoring reuses that embedding.

    ``predictor_init``: ``shared``, every device trains from the same initial predictor; ``per_device``,
    device i from its own (``make_predictor``'s ``node``). The target is shared either way, and scoring
    takes the received states whole, so it does not depend on it.
    """

    def __init__(self, run: RunInfo, *, epochs: int, batch_size: int, lr: float,
                 predictor_init: PredictorInit = "shared") -> None:
        if predictor_init not in get_args(PredictorInit):
            raise ValueError(f"The 'predictor_init' parameter must be one of {get_args(PredictorInit)}; got "
                             f"{predictor_init!r} instead")
        self.seed = run.seed
        self.shape = tuple(run.input_shape)
        self.epochs, self.batch_size, self.lr = epochs, batch_size, lr
        self.predictor_init = predictor_init
        self.device = run.torch_device
        self.target = make_target(self.shape, seed=self.seed).to(self.device)
        self.flops = 0
        self._fx: dict[int, torch.Tensor] = {}  # device -> the target's embedding of its training inputs
        # the architecture that received states are scored with (its own weights are never used)
        self._template = make_predictor(self.shape, seed=self.seed).to(self.device).eval()

    def work_flops(self, samples: int, events: int) -> int:
        """Modelled FLOPs of embedding ``samples`` and fitting a predictor on them ``events`` times (scoring,
        which depends on the reach, left out): the bulk of discovery, for ``auto``."""
        return rnd_flops(self.shape, samples, embed=True, epochs=self.epochs * events)

    def new_predictor(self, device: int) -> nn.Module:
        """Device ``device``'s initial predictor: the shared one (every device builds the same from the seed),
        or with ``per_device`` its own (from the seed and its id)."""
        node = device if self.predictor_init == "per_device" else None
        return make_predictor(self.shape, seed=self.seed, node=node).to(self.device)

    def embedding(self, ctx: DeviceContext) -> Generator[Any, Any, torch.Tensor]:
        """``f(x)`` of this device's training inputs: computed (and charged) on the first call only."""
        if ctx.id not in self._fx:
            x = ctx.shard.train_x
            flops = rnd_flops(self.shape, int(x.shape[0]), embed=True)
            self.flops += flops
            fx: torch.Tensor = yield from ctx.work(target_embedding, self.target, x, flops=flops, what="rnd_embed")
            self._fx[ctx.id] = fx
        return self._fx[ctx.id]

    def train(self, ctx: DeviceContext, event: int) -> Generator[Any, Any, Predictor]:
        """Train this device's predictor on its training inputs; returns its state (what travels)."""
        fx = yield from self.embedding(ctx)
        x = ctx.shard.train_x
        flops = rnd_flops(self.shape, int(x.shape[0]), epochs=self.epochs)
        self.flops += flops
        predictor: nn.Module = yield from ctx.work(
            fitted_predictor, self.new_predictor(ctx.id), x, fx, self.epochs, self.batch_size, self.lr,
            torch_generator(self.seed, "rnd.shuffle", ctx.id, event), flops=flops, what="rnd_train")
        return predictor.state_dict()

    def score(self, ctx: DeviceContext, predictors: dict[int, Predictor], n: int) -> Generator[Any, Any, np.ndarray]:
        """Row of the novelty matrix: s_ij for every predictor held (as states), nan elsewhere."""
        fx = yield from self.embedding(ctx)
        x = ctx.shard.train_x
        ids = sorted(predictors)
        flops = rnd_flops(self.shape, int(x.shape[0]), n_scored=len(ids))
        self.flops += flops
        scores: np.ndarray = yield from ctx.work(state_novelties, self._template, [predictors[j] for j in ids], x, fx,
                                                 flops=flops, what="rnd_score")
        row = np.full(n, np.nan)
        row[ids] = scores
        return row


def heatmap_png(U: np.ndarray, true_clusters: tuple[int, ...], title: str) -> bytes:
    """Fig. 2 heatmap (u_ii - u_ij) as PNG bytes (rendered in a private temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = novelty_heatmap(U, Path(tmp) / "heatmap.png", true_labels=list(true_clusters), title=title)
        return path.read_bytes()


#: Largest novelty matrix written whole (``novelty.npy``: 32 MB at 2,000 devices); above, the scored pairs.
NPY_DEVICES = 2000


def novelty_artifacts(U: np.ndarray, true_clusters: tuple[int, ...], title: str) -> dict[str, bytes]:
    """A run's novelty files: the heatmap, and ``novelty.npy`` (the matrix, nan = not scored) up to
    ``NPY_DEVICES`` devices, else ``novelty_pairs.npz`` (``i``, ``j``, ``u``: the scored pairs only)."""
    if U.shape[0] <= NPY_DEVICES:
        out = {"novelty.npy": npy_bytes(U)}
    else:
        i, j = np.nonzero(np.isfinite(U))
        buf = io.BytesIO()
        np.savez_compressed(buf, i=i.astype(np.int32), j=j.astype(np.int32), u=U[i, j])
        out = {"novelty_pairs.npz": buf.getvalue()}
    return out | {"novelty_heatmap.png": heatmap_png(U, true_clusters, title)}


def npy_bytes(U: np.ndarray) -> bytes:
    """``U`` in NumPy's .npy format."""
    buf = io.BytesIO()
    np.save(buf, U)
    return buf.getvalue()
