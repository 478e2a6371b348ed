"""The cross-trained CIFAR encoder phi (Conditional-PCA paper, Sec. III-A and App. B-C).

For 32x32 RGB data the paper's statistics are computed on phi(x), a 128-d
embedding from a small ResNet (two residual stages, 32 -> 64 -> 128 channels,
global average pooling) trained centrally for classification on a *different*
dataset than the federated task (CIFAR-100 for CIFAR-10 experiments and vice
versa: no information leaks from the federated training set), 50 epochs of
Adam (lr 1e-3, batch 128). Every client gets the same frozen encoder; it only
produces per-sample embeddings for the PCA statistics and never enters the
federated model or the messages.

A checkpoint is ``torch.save({"format", "version", "meta", "state"})``: the
state dict plus a small metadata dict (dataset trained on, embedding dim,
classes, epochs, seed, final training accuracy), loadable with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from p2pfl.errors import ConfigError

__all__ = ["SmallResNetEncoder", "EMBEDDING_DIM", "train_encoder", "save_encoder", "load_encoder", "embed",
           "CHECKPOINT_FORMAT"]

EMBEDDING_DIM = 128
CHECKPOINT_FORMAT = "p2pfl-encoder"
_VERSION = 1
_HOWTO = "make one with 'p2pfl encoder train --dataset cifar100 --out enc.pt' (cifar10 for CIFAR-100 scenarios)"


class _Residual(nn.Module):
    """Basic residual block: Conv-BN-ReLU-Conv-BN + projection shortcut (1x1 conv, BN), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
        )
        self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
        self.out = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x) + self.shortcut(x))


class SmallResNetEncoder(nn.Module):
    """App. B-C encoder: stem Conv(3->32)-BN-ReLU, residual stages 32->64 and 64->128 (stride 2), GAP -> 128-d.

    ``forward`` returns the embedding; ``classify`` adds the head used only for training.
    """

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.stages = nn.Sequential(_Residual(32, 64, 2), _Residual(64, EMBEDDING_DIM, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(EMBEDDING_DIM, num_classes)
        self.meta: dict[str, Any] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.stages(self.stem(x))).flatten(1)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward(x))


def _new_encoder(num_classes: int, seed: int) -> SmallResNetEncoder:
    """A seeded initialisation (only the CPU generator, like ``build_model``)."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return SmallResNetEncoder(num_classes)


def train_encoder(dataset: str, root: Optional[str], *, epochs: int, batch_size: int = 128, lr: float = 1e-3,
                  seed: int, limit: Optional[int] = None, device: str | torch.device = "cpu",
                  progress: Optional[bool] = None) -> SmallResNetEncoder:
    """Train the encoder for classification on ``dataset``'s training split (App. B-C: Adam, cross-entropy).

    ``limit`` keeps a seeded random subset of that many samples. The same seed gives the
    same weights (init and shuffling are seeded). ``progress`` (default: on a terminal, for
    runs of 100+ steps) shows a rich progress bar. The returned model is in eval mode;
    ``model.meta`` records what a checkpoint stores.
    """
    from p2pfl.data.datasets import load_dataset

    if epochs < 0 or batch_size < 1 or lr <= 0 or (limit is not None and limit < 2):
        raise ConfigError(f"encoder training needs epochs >= 0, batch_size >= 1, lr > 0 and limit >= 2; "
                          f"got {epochs}, {batch_size}, {lr}, {limit}")
    pool = load_dataset(dataset, root)
    if pool.input_shape != (3, 32, 32):
        raise ConfigError(f"the encoder is for 3x32x32 images; {dataset!r} has input shape {pool.input_shape}")
    gen = torch.Generator().manual_seed(seed)
    n_all = len(pool.train_y)
    rows = np.arange(n_all) if limit is None or limit >= n_all else np.sort(
        torch.randperm(n_all, generator=gen)[:limit].numpy())
    device = torch.device(device)
    x = torch.from_numpy(pool.train_x[rows].astype(np.float32) / pool.scale).to(device)
    y = torch.from_numpy(pool.train_y[rows].astype(np.int64)).to(device)
    model = _new_encoder(pool.num_classes, seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = len(y)
    steps_per_epoch = -(-n // batch_size)
    show = progress if progress is not None else (sys.stderr.isatty() and epochs * steps_per_epoch >= 100)
    bar = None
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(TextColumn("[bold]training encoder"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                       TextColumn("{task.description}"), transient=True)
        bar.__enter__()
        task = bar.add_task("", total=epochs)
    loss_sum, correct = 0.0, 0
    try:
        model.train()
        for _ in range(epochs):
            loss_sum, correct = 0.0, 0
            order = torch.randperm(n, generator=gen).to(device)
            for i in range(0, n, batch_size):
                idx = order[i:i + batch_size]
                if idx.numel() < 2:
                    continue  # BatchNorm needs two samples
                logits = model.classify(x[idx])
                loss = F.cross_entropy(logits, y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_sum += float(loss.detach()) * idx.numel()
                correct += int((logits.argmax(1) == y[idx]).sum())
            if bar is not None:
                bar.update(task, advance=1, description=f"loss {loss_sum / n:.3f}  acc {correct / n:.3f}")
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    model.eval()
    model.meta = {"dataset": dataset, "embedding_dim": EMBEDDING_DIM, "num_classes": pool.num_classes,
                  "epochs": epochs, "seed": seed, "samples": n,
                  "train_accuracy": correct / n if epochs else float("nan"),
                  "train_loss": loss_sum / n if epochs else float("nan")}
    return model.cpu()


def save_encoder(model: SmallResNetEncoder, path: str | Path) -> Path:
    """Write ``model``'s state dict and metadata to ``path``; returns the path."""
    path = Path(path)
    meta = {"embedding_dim": EMBEDDING_DIM, "num_classes": model.head.out_features, **model.meta}
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": CHECKPOINT_FORMAT, "version": _VERSION, "meta": meta, "state": state}, path)
    return path


def load_encoder(path: str | Path) -> SmallResNetEncoder:
    """A frozen encoder (eval mode, no gradients) from a ``save_encoder`` checkpoint.

    Raises ConfigError, naming the path and how to make one, if it is missing or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"encoder checkpoint {path} not found; {_HOWTO}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{path} is not a p2pfl encoder checkpoint ({why[:120]}); {_HOWTO}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or not isinstance(ckpt.get("meta"), dict) \
            or not isinstance(ckpt.get("state"), dict):
        raise ConfigError(f"{path} is not a p2pfl encoder checkpoint (no '{CHECKPOINT_FORMAT}' format tag); {_HOWTO}")
    meta = ckpt["meta"]
    try:
        model = SmallResNetEncoder(int(meta["num_classes"]))
        model.load_state_dict(ckpt["state"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{path} is a malformed encoder checkpoint ({why[:120]}); {_HOWTO}") from None
    model.meta = dict(meta)
    model.requires_grad_(False)
    return model.eval()


@torch.no_grad()
def embed(encoder: nn.Module, x: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """phi(x): the frozen encoder's embeddings ``(n, 128)`` of images ``x`` ``(n, 3, 32, 32)``, in batches."""
    if x.shape[0] == 0:
        return torch.zeros((0, EMBEDDING_DIM), dtype=x.dtype, device=x.device)
    return torch.cat([encoder(x[i:i + batch_size]) for i in range(0, x.shape[0], batch_size)])
