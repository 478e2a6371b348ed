"""DataSpec validation: defaults, and one-line errors for combinations that make no sense."""

from __future__ import annotations

import pydantic
import pytest

from p2pfl.data import DataSpec
from p2pfl.errors import ConfigError
from p2pfl.validation import parse_model


def parse(data: dict) -> DataSpec:
    return parse_model(DataSpec, data, "s.yaml", "data")


def test_defaults():
    spec = DataSpec()
    assert (spec.dataset, spec.partition.kind, spec.test_fraction, spec.samples_per_client, spec.download) == (
        "digits", "iid", 0.2, None, False)
    with pytest.raises(pydantic.ValidationError):
        spec.dataset = "mnist"  # frozen


@pytest.mark.parametrize("data,message", [
    ({"dataset": "svhn"}, "unknown dataset 'svhn'; valid: digits, digits28, mnist, fashion_mnist, cifar10, cifar100"),
    ({"partition": {"kind": "label_shift", "n_clusters": 20}},
     "partition.n_clusters=20 exceeds the 10 classes of 'digits' for label_shift; use n_clusters <= 10"),
    ({"dataset": "cifar100", "partition": {"kind": "semantic_concept"}},
     "partition.kind semantic_concept has no semantic mapping for 'cifar100'"),
    ({"dataset": "fashion_mnist", "partition": {"kind": "covariate_subclass", "n_clusters": 5}},
     "partition.n_clusters=5 exceeds the 4 subclasses per superclass of 'fashion_mnist'; use n_clusters <= 4"),
    ({"dataset": "cifar10", "partition": {"kind": "combined", "covariate_clusters": 5}},
     "partition.covariate_clusters=5 exceeds the 4 subclasses per superclass of 'cifar10'"),
    ({"dataset": "synthetic_linear"}, "dataset 'synthetic_linear' is generated per cluster; set partition.kind: parameter_shift"),
    ({"partition": {"kind": "parameter_shift"}}, "parameter_shift needs dataset synthetic_linear or synthetic_logistic"),
    ({"partition": {"kind": "cross_dataset", "others": ["fashion_mnist"]}},
     "'fashion_mnist' has input shape (1, 28, 28) but 'digits' has (1, 8, 8)"),
    ({"sparsity": "rich", "clients_per_cluster": 7}, "sparsity=rich means clients_per_cluster=5 but clients_per_cluster=7"),
    ({"partition": {"kind": "feature_skew", "n_clusters": 3, "noise_std": [0.1, 0.2]}},
     "noise_std lists 2 values but n_clusters=3"),
    ({"partition": {"kind": "feature_skew", "mode": "smoothed_pattern", "smooth": 6}},
     "field 'data.partition.smooth': smooth must be odd (a box centred on each pixel); got 6"),
    ({"partition": {"kind": "feature_skew", "mode": "smoothed_pattern", "smooth": 0}},
     "field 'data.partition.smooth': Input should be greater than or equal to 1"),
    ({"partition": {"kind": "feature_skew", "mode": "smooth"}}, "field 'data.partition.mode'"),
    ({"partition": {"kind": "feature_skew", "mode": "smoothed_pattern", "n_clusters": 65}},
     "partition.n_clusters=65 exceeds the 64 pixels of 'digits' for smoothed_pattern mode"),
    ({"partition": {"kind": "dirichlet", "alpha": 0}}, "field 'data.partition.alpha': Input should be greater than 0"),
    ({"partition": {"kind": "iid", "alpha": 1}}, "unknown field 'data.partition.alpha'"),
    ({"partition": {"kind": "shuffle"}}, "data.partition"),
    ({"test_fraction": 1.0}, "field 'data.test_fraction': Input should be less than 1"),
    ({"overlap": True}, "overlap needs samples_per_client (how many samples each device draws); set it"),
    ({"overlap": True, "samples_per_client": 5, "partition": {"kind": "dirichlet", "alpha": 0.5}},
     "overlap is not supported by partition.kind dirichlet; valid with: iid, feature_skew"),
])
def test_bad_combinations_are_one_line_config_errors(data, message):
    with pytest.raises(ConfigError) as err:
        parse(data)
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("s.yaml: ")


def test_label_shift_cifar100_allows_twenty_superclasses_not_more():
    assert parse({"dataset": "cifar100", "partition": {"kind": "label_shift", "n_clusters": 20}}).n_clusters == 20
    with pytest.raises(ConfigError, match="exceeds the 20 superclasses of 'cifar100'"):
        parse({"dataset": "cifar100", "partition": {"kind": "label_shift", "n_clusters": 21}})


@pytest.mark.parametrize("partition,k", [
    ({"kind": "iid"}, 1), ({"kind": "rotation", "angles": [0, 90, 180]}, 3), ({"kind": "semantic_concept"}, 2),
    ({"kind": "combined", "covariate_clusters": 3}, 6), ({"kind": "cross_dataset", "others": ["mnist"]}, 2),
])
def test_cluster_counts(partition, k):
    dataset = "fashion_mnist" if partition["kind"] == "cross_dataset" else "digits"
    assert parse({"dataset": dataset, "partition": partition}).n_clusters == k


def test_sparsity_presets():
    assert [parse({"sparsity": s}).cluster_size for s in ["rich", "med", "sparse", "very_sparse", "super_sparse"]] == [5, 10, 20, 50, 100]
