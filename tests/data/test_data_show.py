"""The federation figure and table."""

from __future__ import annotations

from p2pfl.data import DataSpec, build_federation
from p2pfl.data.show import federation_table, label_counts, show_federation


def test_show_federation_writes_png(tmp_path):
    fed = build_federation(DataSpec(partition={"kind": "label_shift", "n_clusters": 2}), 4, seed=0)
    out = show_federation(fed, tmp_path / "sub" / "fed.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    counts = label_counts(fed)
    assert counts.shape == (4, 10) and counts[:2, 5:].sum() == 0 and counts[2:, :5].sum() == 0


def test_federation_table_rows():
    fed = build_federation(DataSpec(partition={"kind": "semantic_concept"}), 2, seed=0)
    lines = federation_table(fed).splitlines()
    assert lines[0].split() == ["device", "cluster", "source", "train", "test", "labels"]
    assert lines[1].split() == ["0", "0", "digits", "719", "180", "0,1"]
    assert lines[2].split() == ["1", "1", "digits", "719", "180", "0,1"]
    assert lines[3] == "digits / semantic_concept: 2 devices, 2 clusters, 2 classes, input (1, 8, 8), 1438 training samples"


def test_show_vector_federation(tmp_path):
    spec = DataSpec(dataset="synthetic_linear", partition={"kind": "parameter_shift", "n_clusters": 2})
    fed = build_federation(spec, 4, seed=0)
    assert show_federation(fed, tmp_path / "v.png").is_file()
    assert federation_table(fed).splitlines()[1].split()[-1] == "-"
