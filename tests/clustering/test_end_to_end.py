"""RND federation discovery on real pixels: 4 feature-skewed groups x 3 devices of sklearn digits.

Setup (RND clustered-FL paper Sec. V, authors' code for the skew): digits
(8x8, /16) are split so that every device has the same label distribution;
each group adds its own fixed pattern (zero-sum, pairwise-equidistant
simplex vertices, per-pixel RMS ``rms``) and clamps to [0, 1]. All devices
share the target seed and the predictor init seed (as the authors do).

Deviations from the paper's defaults, and why (measured, see report):

* batch 16 x 20 epochs (~190 Adam steps on ~150 samples) instead of batch
  128 x 10 epochs: on 150-sample shards the defaults give 20 steps, the
  predictors stay near init and no alpha separates the groups. A CIFAR-10
  shard of the paper (~4,200 samples) gets ~330 steps with the defaults.
* pattern RMS 0.3 instead of the authors' 0.15: at 0.15 the cross-group
  novelty is only 5-20% above the own novelty on these tiny 8x8 images, so
  the band alpha = 0.3 merges groups (alpha ~0.1 separates them on some
  seeds). With RMS 0.3, alpha = 0.3 recovers the groups on seeds 0, 1, 2.
* Per-pixel Gaussian noise of std 0/0.15/0.3/0.45 (the paper's wording) is
  not recovered by the band rule on digits at any alpha we tried: adjacent
  noise levels differ by only a few percent in novelty.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from p2pfl.clustering import (
    adjusted_rand_index,
    compatibility_clusters,
    compatibility_graph,
    label_propagation_clusters,
    make_predictor,
    make_target,
    misclassification_rate,
    novelty_matrix,
    train_predictor,
)
from p2pfl.seeding import stream, torch_generator

GROUPS, PER_GROUP = 4, 3


def simplex_patterns(k: int, dim: int, rms: float, rng: np.random.Generator) -> np.ndarray:
    """k zero-sum, pairwise-equidistant vectors of per-entry RMS ``rms`` (authors' construction, unsmoothed)."""
    q, _ = np.linalg.qr(rng.standard_normal((dim, k)))
    v = q.T - q.T.mean(axis=0)
    v *= rms * np.sqrt(dim) / np.linalg.norm(v, axis=1, keepdims=True)
    return v


def skewed_digit_shards(seed: int, rms: float) -> list[torch.Tensor]:
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    n = GROUPS * PER_GROUP
    rng = stream(seed, "test.split")
    shards: list[list[int]] = [[] for _ in range(n)]
    for c in range(10):  # deal each class round-robin: same label distribution everywhere
        idx = rng.permutation(np.flatnonzero(digits.target == c))
        offset = int(rng.integers(n))
        for k, i in enumerate(idx):
            shards[(k + offset) % n].append(int(i))
    patterns = simplex_patterns(GROUPS, 64, rms, stream(seed, "test.pattern")).astype(np.float32)
    out = []
    for dev in range(n):
        x = torch.from_numpy(images[np.sort(shards[dev])])[:, None]
        shift = torch.from_numpy(patterns[dev // PER_GROUP]).reshape(1, 1, 8, 8)
        out.append((x + shift).clamp(0.0, 1.0))
    return out


def novelty_of_federation(seed: int, rms: float) -> np.ndarray:
    xs = skewed_digit_shards(seed, rms)
    target = make_target(1, seed=seed)
    predictors = []
    for dev, x in enumerate(xs):
        p = make_predictor(1, seed=seed)  # shared init, as in the authors' code
        train_predictor(p, target, x, epochs=20, batch_size=16, generator=torch_generator(seed, "rnd.shuffle", dev))
        predictors.append(p)
    return novelty_matrix(predictors, target, xs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_compatibility_recovers_feature_skewed_groups(seed):
    truth = np.repeat(np.arange(GROUPS), PER_GROUP)
    U = novelty_of_federation(seed, rms=0.3)
    clusters = compatibility_clusters(U, 0.3)
    assert clusters == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert adjusted_rand_index(truth, clusters) == 1.0
    assert misclassification_rate(truth, clusters) == 0.0
    # own novelty is the row minimum up to the band, and Fig. 2's block structure holds
    same = truth[:, None] == truth[None, :]
    ratio = U / np.diag(U)[:, None]
    assert np.abs(ratio[same] - 1).max() < 0.3 < (ratio[~same] - 1).min()
    # here the decentralized rule (components only) agrees
    assert label_propagation_clusters(compatibility_graph(U, 0.3))[0] == clusters
