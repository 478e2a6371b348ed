"""The CLI's tools: list, topology show, data show; and the quickstart's promise (>= 90% on digits)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import pytest

import p2pfl
from p2pfl.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("what,expected", [("protocols", ["fedavg", "gossip", "local"]),
                                           ("datasets", ["digits", "fashion_mnist", "cifar10", "synthetic_linear"]),
                                           ("partitions", ["iid", "dirichlet", "label_shift", "feature_skew"]),
                                           ("topologies", ["ring", "random_geometric", "edge_list"])])
def test_list_prints_every_registered_name(capsys, what, expected):
    assert main(["list", what]) == 0
    first_words = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    for name in expected:
        assert name in first_words


def test_list_protocols_marks_server_protocols(capsys):
    main(["list", "protocols"])
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "server" in lines["fedavg"].split()[1]
    assert lines["gossip"].split()[1] == "serverless"
    assert lines["conditional"].split()[1] == "server|none"  # transport: gossip / mode: pooled need no server


def test_topology_show_draws_a_png(tmp_path, capsys):
    out = tmp_path / "t.png"
    assert main(["topology", "show", str(ROOT / "topologies" / "star_server10.yaml"), "--out", str(out)]) == 0
    assert "10 devices, 10 links, 1 servers" in capsys.readouterr().out
    img = mpimg.imread(out)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_data_show_draws_a_png_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "d.png"
    code = main(["data", "show", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out),
                 "--set", "data.partition={kind: label_shift, n_clusters: 2}"])
    assert code == 0
    text = capsys.readouterr().out
    assert "label_shift" in text and "2 clusters" in text
    assert mpimg.imread(out).shape[0] > 100


@pytest.mark.slow
def test_quickstart_reaches_90_percent_on_digits():
    result = p2pfl.run(ROOT / "scenarios" / "quickstart.yaml", write=False)
    assert result.n_devices == 16
    assert result.accuracy_mean >= 0.90
    assert result.messages_total > 0 and result.bytes_total > 0
    d = [e["value"] for e in result.logs["consensus_distance"]]
    assert d[0] == 0.0  # common initial model
    assert d[-1] < max(d) / 2  # local training spreads the models, gossip pulls them back together
