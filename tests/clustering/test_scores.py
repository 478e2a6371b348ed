"""Scores against the true clusters (RND clustered-FL paper, Sec. III)."""

from __future__ import annotations

import importlib
import io
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfl.clustering import adjusted_rand_index, labels_from_clusters, misclassification_rate, novelty_heatmap

TRUTH = np.repeat([0, 1, 2, 3], 3)  # 4 groups x 3 devices


def test_relabelled_perfect_partition():
    clusters = [[9, 10, 11], [0, 1, 2], [6, 7, 8], [3, 4, 5]]
    assert misclassification_rate(TRUTH, clusters) == 0.0
    assert adjusted_rand_index(TRUTH, clusters) == 1.0
    assert misclassification_rate(np.array([7, 7, 7, 2, 2, 2, 5, 5, 5, 0, 0, 0]), clusters) == 0.0


def test_one_of_twelve_misplaced():
    clusters = [[0, 1, 2, 3], [4, 5], [6, 7, 8], [9, 10, 11]]
    assert misclassification_rate(TRUTH, clusters) == pytest.approx(1 / 12)
    assert adjusted_rand_index(TRUTH, clusters) < 1.0


def test_different_number_of_federations():
    assert misclassification_rate(TRUTH, [list(range(12))]) == pytest.approx(9 / 12)  # all in one
    singletons = [[i] for i in range(12)]
    assert misclassification_rate(TRUTH, singletons) == pytest.approx(8 / 12)  # 4 matched singletons
    split = [[0, 1], [2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert misclassification_rate(TRUTH, split) == pytest.approx(1 / 12)


def _paper_rate(truth: np.ndarray, clusters: list[list[int]]) -> float:
    """Brute force over permutations of the paper's sum of symmetric differences, / 2N."""
    true_sets = [set(np.flatnonzero(truth == c).tolist()) for c in np.unique(truth)]
    fed_sets = [set(f) for f in clusters]
    size = max(len(true_sets), len(fed_sets))
    true_sets += [set()] * (size - len(true_sets))
    fed_sets += [set()] * (size - len(fed_sets))
    best = min(sum(len(fed_sets[p[q]] ^ true_sets[q]) for q in range(size)) for p in itertools.permutations(range(size)))
    return best / (2 * truth.size)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8), st.lists(st.integers(0, 4), min_size=8, max_size=8))
def test_rate_equals_paper_symmetric_difference_over_2n(truth, assignment):
    truth = np.asarray(truth)
    pred = np.asarray(assignment[: truth.size])
    clusters = [np.flatnonzero(pred == q).tolist() for q in np.unique(pred)]
    assert misclassification_rate(truth, clusters) == pytest.approx(_paper_rate(truth, clusters))


def test_labels_from_clusters_checks_the_partition():
    assert labels_from_clusters([[2, 0], [1]], 3).tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="more than one place"):
        labels_from_clusters([[0, 1], [1, 2]], 3)
    with pytest.raises(ValueError, match=r"missing \[2\]"):
        labels_from_clusters([[0, 1]], 3)
    with pytest.raises(ValueError, match=r"node ids in \[0, 3\)"):
        labels_from_clusters([[0, 1, 3]], 3)
    with pytest.raises(ValueError, match="missing"):
        misclassification_rate(TRUTH, [[0, 1, 2]])


def test_novelty_heatmap_writes_a_png(tmp_path):
    U = np.full((6, 6), 3.0)
    np.fill_diagonal(U, 1.0)
    U[0, 5] = np.nan
    out = novelty_heatmap(U, tmp_path / "fig" / "heat.png", true_labels=[1, 0, 1, 0, 1, 0], title="t")
    data = out.read_bytes()
    assert out.exists() and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    with pytest.raises(ValueError, match="length 6"):
        novelty_heatmap(U, tmp_path / "x.png", true_labels=[0, 1])


@pytest.mark.slow
def test_a_large_heatmap_draws_block_means_and_large_matrices_travel_as_pairs(tmp_path, monkeypatch):
    novelty = importlib.import_module("p2pfl.clustering.novelty")  # (the package exports a function of that name)
    plots = importlib.import_module("p2pfl.clustering.plots")

    D = np.array([[1.0, 2.0, np.nan, 4.0], [3.0, np.nan, np.nan, np.nan], [5.0, 6.0, 7.0, 8.0], [np.nan] * 4])
    assert np.array_equal(plots._block_mean(D, 2), np.array([[2.0, 4.0], [5.5, 7.5]]), equal_nan=True)
    assert np.array_equal(plots._block_mean(D[:3, :3], 2), np.array([[2.0, np.nan], [5.5, 7.0]]), equal_nan=True)
    monkeypatch.setattr(novelty, "NPY_DEVICES", 3)
    U = np.full((4, 4), np.nan)
    U[[0, 1, 2, 3, 0], [0, 1, 2, 3, 2]] = [1.0, 2.0, 3.0, 4.0, 0.5]
    files = novelty.novelty_artifacts(U, (0, 0, 1, 1), "t")
    assert sorted(files) == ["novelty_heatmap.png", "novelty_pairs.npz"]
    with np.load(io.BytesIO(files["novelty_pairs.npz"])) as z:
        assert z["i"].tolist() == [0, 0, 1, 2, 3] and z["j"].tolist() == [0, 2, 1, 2, 3]
        assert z["u"].tolist() == [1.0, 0.5, 2.0, 3.0, 4.0]
    monkeypatch.setattr(plots, "HEATMAP_CELLS", 2)  # 4 devices in 2 x 2 blocks: still a PNG
    assert plots.novelty_heatmap(U, tmp_path / "h.png", true_labels=[0, 0, 1, 1]).read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(novelty, "NPY_DEVICES", 4)
    assert sorted(novelty.novelty_artifacts(U, (0, 0, 1, 1), "t")) == ["novelty.npy", "novelty_heatmap.png"]
