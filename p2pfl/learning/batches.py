"""Each device's batch orders: one permutation of its training samples an epoch, drawn from the device's own
generator (``node_generator``: seeded from the run's seed and the device's id), in the order of its jobs.

The event kernel hands each device its generator and every training job draws an epoch's order as it runs
(``batch_order``: ``train_local``, the batched executor); the tensor engine draws every order a run can use
when the fleet is built (``batch_orders``), so a device trains on the same batches under both engines.
"""

from __future__ import annotations

import numpy as np
import torch

from p2pfl.seeding import child_seeds, torch_generator

__all__ = ["NODE", "node_generator", "batch_order", "batch_orders"]

#: The purpose a node's own generator is seeded for (``p2pfl.seeding``).
NODE = "node"


def node_generator(seed: int, node: int) -> torch.Generator:
    """Node ``node``'s own torch generator: its batch orders (and anything else its training draws)."""
    return torch_generator(seed, NODE, node)


def batch_order(generator: torch.Generator, samples: int) -> torch.Tensor:
    """One epoch's order of ``samples`` training samples: the next permutation of ``generator``."""
    return torch.randperm(samples, generator=generator)


def batch_orders(seed: int, devices: int, samples: int, draws: int, dtype: torch.dtype) -> torch.Tensor:
    """``(devices, draws, samples)``: the first ``draws`` epoch orders of devices 0..devices-1 (as ``dtype``),
    as each device's ``node_generator`` gives them (its seeds computed for every device at once)."""
    out = torch.empty((devices, draws, samples), dtype=dtype)
    g = torch.Generator()
    for i, s in enumerate(child_seeds(seed, NODE, np.arange(devices)).tolist()):
        g.manual_seed(s)
        for t in range(draws):
            out[i, t] = batch_order(g, samples)
    return out
