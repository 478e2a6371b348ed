"""The Conditional-PCA reproduction's studies do what their files say: the K sweeps keep the paper's design
(a fixed total of training data split over K clusters x 5 clients), the sparsity sweep shares 3000 samples per
cluster, and the memorization study holds one client per cluster out of pooled training."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from p2pfl.data import build_federation
from p2pfl.study.spec import load_study

STUDIES = Path(__file__).resolve().parents[2] / "scenarios" / "studies" / "conditional"
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
needs_fmnist = pytest.mark.skipif(not FMNIST.exists(), reason="apt-get install dataset-fashion-mnist")


def _k_cells(name: str) -> dict[int, object]:
    """One cell per K (seed 0, the first variant): K -> its scenario."""
    study = load_study(STUDIES / f"{name}.yaml")
    first = study.cells[0].variant
    return {c.scenario.data.partition.n_clusters: c.scenario for c in study.cells
            if c.seed == 0 and c.variant == first}


@pytest.mark.parametrize("name,ks", [("e1_k", [2, 3, 5, 10]), ("e1_k_ifca", [2, 3, 5, 10]),
                                     ("e3b_k", [2, 3, 4, 5]), ("e3b_k_ifca", [2, 3, 4, 5])])
@pytest.mark.slow
def test_k_sweeps_split_a_fixed_total_over_k_clusters_of_five(name, ks):
    cells = _k_cells(name)
    assert sorted(cells) == ks
    for k, sc in cells.items():
        assert sc.topology.n == 5 * k
        assert sc.topology.n * sc.data.samples_per_client == 6000
        if sc.protocol.name == "ifca":
            assert sc.protocol.n_clusters == k  # the paper gives IFCA the true K


@needs_fmnist
@pytest.mark.parametrize("name", ["e1_k", "e3b_k"])
@pytest.mark.slow
def test_k_sweep_federations_hold_the_same_data_in_all_and_equal_clusters(name):
    for k, sc in _k_cells(name).items():
        fed = build_federation(sc.data, sc.topology.n, seed=0)
        sizes = [int(s.train_y.shape[0]) for s in fed.shards]
        assert sum(sizes) == 6000, k
        per_cluster = Counter()
        for size, cluster in zip(sizes, fed.true_clusters):
            per_cluster[cluster] += size
        assert per_cluster == {c: 6000 // k for c in range(k)}
        assert Counter(fed.true_clusters) == {c: 5 for c in range(k)}


@pytest.mark.parametrize("name", ["e1_sparsity", "e2a_sparsity", "e3a_sparsity", "e3b_sparsity"])
@pytest.mark.slow
def test_sparsity_sweeps_split_the_whole_training_set_as_the_paper_does(name):
    """The paper's design (issue 34): its two ends, 5 clients x 6,000 and 100 x 300 per cluster, K = 2."""
    study = load_study(STUDIES / f"{name}.yaml")
    seen = set()
    for c in study.cells:
        sc = c.scenario
        assert sc.topology.n * sc.data.samples_per_client == 60_000
        seen.add((sc.data.sparsity, sc.topology.n, sc.data.samples_per_client))
    assert seen == {("rich", 10, 6000), ("super_sparse", 200, 300)}
    assert len(study.cells) == 16 * 2 * 3


def test_memorization_study_holds_one_client_per_cluster_out_of_pooled_training():
    study = load_study(STUDIES / "memorization.yaml")
    assert len(study.cells) == 5 * 2 * 2 * 3
    for c in study.cells:
        p = c.scenario.protocol
        assert p.held_out_per_cluster == 1
        assert p.name == "centralized" or p.mode == "pooled"
