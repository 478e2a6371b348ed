"""The ``data:`` section of a scenario: dataset, partition and sizes.

Every partition kind has its own model chosen by ``kind`` (a tagged union).
Checks that need only the spec (dataset facts are static, see
``DATASET_INFO``) run here, so a bad combination is rejected when the YAML is
validated; checks that need the number of devices run in ``build_federation``.

YAML (every field but ``partition.kind`` has a default)::

    data:
      dataset: fashion_mnist        # digits | digits28 | mnist | fashion_mnist | cifar10 | cifar100
                                    # | synthetic_linear | synthetic_logistic
      root: null                    # folder of the dataset files (flat or torchvision layout)
      download: false               # true: torchvision fetches missing files into root
      test_fraction: 0.2            # local test set = this fraction of a device's local data
      test_samples_per_client: null # or exactly this many local test samples per device (overrides test_fraction)
      samples_per_client: null      # training samples per device; null = deal the whole pool
      clients_per_cluster: null     # if set, must equal n_devices / n_clusters
      sparsity: null                # rich | med | sparse | very_sparse | super_sparse (5/10/20/50/100 per cluster)
      partition: {kind: iid}
      # {kind: dirichlet, alpha: 0.5, min_samples: 1}
      # {kind: quantity_skew, distribution: dirichlet, beta: 0.5}   (or power_law with exponent: 1.0)
      # {kind: label_shift, n_clusters: 2, assignment: blocks}      (E1; classes_per_cluster: 5 overlaps the groups)
      # {kind: covariate_subclass, n_clusters: 2}                   (E2a)
      # {kind: rotation, angles: [0, 90, 180, 270]}                 (E2b)
      # {kind: semantic_concept}                                    (E3a, 2 clusters)
      # {kind: label_permutation, n_clusters: 3, identity_first: true}  (E3b)
      # {kind: cross_dataset, others: [mnist], fallback: true}      (E4a)
      # {kind: combined, covariate_clusters: 2}                     (E4b, 2C clusters)
      # {kind: feature_skew, n_clusters: 4, mode: noise, noise_std: 0.3}   (or mode: pattern, rms: 0.1)
      # {kind: feature_skew, n_clusters: 4, mode: smoothed_pattern, rms: 0.15, smooth: 7}  (the RND authors' code)
      # {kind: parameter_shift, n_clusters: 3, n_features: 10, noise_std: 0.1}  (synthetic_* only)
      # {kind: robot_suites, ...}  (a plug-in's kind: p2pfl.robotics.schema.RobotSuitesPartition)

Every clustered kind takes ``assignment: blocks`` (device i -> floor(i*K/n),
contiguous ids) or ``round_robin`` (device i -> i % K).

A plug-in adds partition kinds of its own (entry-point group ``p2pfl.partitions``, see
``p2pfl.plugins``): a :class:`PluginPartition` subclass holds the kind's fields and checks, and builds
its federation itself. Robotics' ``robot_suites`` is one (``p2pfl.robotics.schema``); nothing here
knows it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args

from pydantic import Discriminator, Field, SerializeAsAny, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError

from p2pfl import limits
from p2pfl.data.datasets import DATASET_INFO, dataset_info
from p2pfl.data.semantic import SEMANTIC_MAPPINGS, SUPERCLASSES
from p2pfl.errors import DataError
from p2pfl.plugins import GROUPS, Registry, import_object
from p2pfl.validation import Strict

__all__ = [
    "DataSpec",
    "PartitionSpec",
    "IIDPartition",
    "DirichletPartition",
    "QuantitySkewPartition",
    "LabelShiftPartition",
    "CovariateSubclassPartition",
    "RotationPartition",
    "SemanticConceptPartition",
    "LabelPermutationPartition",
    "CrossDatasetPartition",
    "CombinedPartition",
    "FeatureSkewPartition",
    "ParameterShiftPartition",
    "PluginPartition",
    "PARTITION_PLUGINS",
    "SPARSITY",
    "PARTITIONS",
]

# Conditional paper, App. C-B: clients per cluster of each sparsity level.
SPARSITY: dict[str, int] = {"rich": 5, "med": 10, "sparse": 20, "very_sparse": 50, "super_sparse": 100}

Assignment = Literal["blocks", "round_robin"]


class IIDPartition(Strict):
    """Uniform random split; one cluster."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Strict):
    """Label skew: per-class shares ~ Dirichlet(alpha); one cluster."""

    kind: Literal["dirichlet"]
    alpha: float = Field(0.5, gt=0)
    min_samples: int = Field(1, ge=0, le=limits.MAX_SAMPLES_PER_CLIENT, description="redraw until every device has this many (all-data mode)")


class QuantitySkewPartition(Strict):
    """Sizes skewed (Dirichlet(beta) or power law), labels iid; one cluster."""

    kind: Literal["quantity_skew"]
    distribution: Literal["dirichlet", "power_law"] = "dirichlet"
    beta: float = Field(0.5, gt=0)
    exponent: float = Field(1.0, ge=0)
    min_samples: int = Field(1, ge=1, le=limits.MAX_SAMPLES_PER_CLIENT)


class _Clustered(Strict):
    assignment: Assignment = "blocks"


class LabelShiftPartition(_Clustered):
    """E1: K clusters with disjoint class groups, or overlapping ones of ``classes_per_cluster`` classes."""

    kind: Literal["label_shift"]
    n_clusters: int = Field(2, ge=1, le=limits.MAX_DEVICES)
    classes_per_cluster: int | None = Field(
        None, ge=1, le=limits.MAX_COUNT,
        description="null: disjoint contiguous blocks (the paper's E1); c: cluster k holds the c classes from "
                    "floor(k C / K) on, cyclically, so neighbouring groups share classes when c > C / K")


class CovariateSubclassPartition(_Clustered):
    """E2a: same superclass labels, different subclasses per cluster."""

    kind: Literal["covariate_subclass"]
    n_clusters: int = Field(2, ge=1, le=limits.MAX_DEVICES)


class RotationPartition(_Clustered):
    """E2b: cluster k sees images rotated by angles[k] degrees."""

    kind: Literal["rotation"]
    angles: list[float] = Field(default_factory=lambda: [0.0, 180.0], min_length=1)


class SemanticConceptPartition(_Clustered):
    """E3a: two clusters label the same images with different semantic groupings."""

    kind: Literal["semantic_concept"]


class LabelPermutationPartition(_Clustered):
    """E3b: each cluster a different seeded permutation of the labels."""

    kind: Literal["label_permutation"]
    n_clusters: int = Field(2, ge=1, le=limits.MAX_DEVICES)
    identity_first: bool = True


class CrossDatasetPartition(_Clustered):
    """E4a: cluster 0 uses data.dataset, cluster k the dataset others[k-1]."""

    kind: Literal["cross_dataset"]
    others: list[str] = Field(default_factory=lambda: ["mnist"], min_length=1)
    fallback: bool = Field(True, description="use digits28 for mnist when its files are missing")


class CombinedPartition(_Clustered):
    """E4b: 2 concept groups x C covariate clusters = 2C clusters."""

    kind: Literal["combined"]
    covariate_clusters: int = Field(2, ge=1, le=limits.MAX_DEVICES)


class FeatureSkewPartition(_Clustered):
    """RND paper: K groups with the same labels, each with its own input shift.

    ``smoothed_pattern`` is the RND authors' code (``FEATURE_SKEW_RMS = 0.15``, a box-smoothed
    equidistant mean-shift pattern per group, ``p2pfl.data.transforms.smoothed_patterns``).
    """

    kind: Literal["feature_skew"]
    n_clusters: int = Field(4, ge=1, le=limits.MAX_DEVICES)
    mode: Literal["noise", "pattern", "smoothed_pattern"] = "noise"
    noise_std: Union[float, list[float]] = 0.3
    rms: float = Field(0.1, ge=0)
    smooth: int = Field(7, ge=1, le=limits.MAX_COUNT,
                        description="smoothed_pattern: side of the box filter (odd; the authors' 7)")

    @field_validator("smooth")
    @classmethod
    def _odd(cls, v):
        if v % 2 == 0:
            raise ValueError(f"smooth must be odd (a box centred on each pixel); got {v}")
        return v

    @field_validator("noise_std")
    @classmethod
    def _non_negative(cls, v):
        vals = v if isinstance(v, list) else [v]
        if any(s < 0 for s in vals):
            raise ValueError("noise_std must be >= 0")
        return v

    @model_validator(mode="after")
    def _list_length(self):
        if isinstance(self.noise_std, list) and len(self.noise_std) != self.n_clusters:
            raise ValueError(f"noise_std lists {len(self.noise_std)} values but n_clusters={self.n_clusters}; give one per cluster")
        return self


class ParameterShiftPartition(_Clustered):
    """MCDC synthetic tasks (Conditional paper, App. A-A): clusters with distinct generating parameters."""

    kind: Literal["parameter_shift"]
    n_clusters: int = Field(3, ge=1, le=limits.MAX_DEVICES)
    n_features: int = Field(10, ge=1, le=limits.MAX_FEATURES)
    noise_std: float = Field(0.1, ge=0)


class PluginPartition(Strict):
    """A partition kind a plug-in registers (entry-point group ``p2pfl.partitions``, see ``p2pfl.plugins``).

    A subclass declares ``kind: Literal["its_name"]`` and its fields, as the built-in kinds do, and adds
    what no plan of ``p2pfl.data.partitions`` knows about it: the true clusters it defines
    (``n_clusters``), the datasets it takes (``datasets``; None: any), its checks of the rest of ``data:``
    (``check``) and its federation (``builder``).
    """

    kind: str
    #: The datasets this kind builds (None: any dataset).
    datasets: ClassVar[tuple[str, ...] | None] = None
    #: ``module:function`` of ``function(data, n_devices, *, seed) -> Federation``, imported when a run builds
    #: the shards (validating a scenario imports the partition's class only, never its data machinery).
    builder: ClassVar[str] = ""

    @property
    def n_clusters(self) -> int:
        """Ground-truth clusters the partition defines (before devices are known)."""
        return 1

    def check(self, data: DataSpec) -> None:
        """Refuse a ``data:`` section this kind cannot build: ValueError, one line (after the generic checks)."""

    def build(self, data: DataSpec, n_devices: int, *, seed: int) -> Any:
        """One shard per device, a ``p2pfl.data.Federation`` (``builder``; not imported here: ``p2pfl.data.shards``
        needs torch); the same (data, n_devices, seed) gives identical tensors."""
        if not self.builder:
            raise NotImplementedError(f"partition kind {self.kind!r} names no builder")
        build = import_object(self.builder)
        if not callable(build):
            raise TypeError(f"partition kind {self.kind!r}: builder {self.builder!r} is not a function")
        return build(data, n_devices, seed=seed)


PartitionSpec = Annotated[
    Union[
        IIDPartition,
        DirichletPartition,
        QuantitySkewPartition,
        LabelShiftPartition,
        CovariateSubclassPartition,
        RotationPartition,
        SemanticConceptPartition,
        LabelPermutationPartition,
        CrossDatasetPartition,
        CombinedPartition,
        FeatureSkewPartition,
        ParameterShiftPartition,
    ],
    Field(discriminator="kind"),
]

def _plugin_partition(name: str, obj: object) -> type[PluginPartition]:
    if not (isinstance(obj, type) and issubclass(obj, PluginPartition)):
        raise ValueError(f"plug-in partition kind {name!r} ({GROUPS['partitions']}) is not a subclass of "
                         "p2pfl.data.schema.PluginPartition")
    return obj


#: Partition kinds of plug-ins: kind -> its model class (imported when first used).
PARTITION_PLUGINS: Registry[type[PluginPartition]] = Registry({}, GROUPS["partitions"], _plugin_partition)
#: The built-in kinds, in the tagged union's order.
_BUILTIN_KINDS: tuple[str, ...] = tuple(get_args(m.model_fields["kind"].annotation)[0]
                                        for m in get_args(get_args(PartitionSpec)[0]))


def _partition_family(value: Any) -> str:
    """Which branch validates a ``partition:`` value: a plug-in's kind (validated into its class first,
    ``DataSpec._plugin_kind``) or the built-in tagged union (which words every other error)."""
    return "plugin" if isinstance(value, PluginPartition) else "builtin"


#: The ``partition:`` field: a built-in kind, or a plug-in's (serialized with all of its own fields).
PartitionField = Annotated[
    Union[Annotated[PartitionSpec, Tag("builtin")], Annotated[SerializeAsAny[PluginPartition], Tag("plugin")]],
    Discriminator(_partition_family),
]

PARTITIONS: dict[str, str] = {
    "iid": "uniform random split of the training pool; one cluster",
    "dirichlet": "label skew: class shares per device ~ Dirichlet(alpha); one cluster",
    "quantity_skew": "device sizes ~ Dirichlet(beta) shares or a power law, labels iid; one cluster",
    "label_shift": "E1: K clusters receive disjoint class groups (CIFAR-100: official superclasses)",
    "covariate_subclass": "E2a: clusters predict the same superclasses from different subclasses",
    "rotation": "E2b: cluster k sees images rotated by angles[k] degrees",
    "semantic_concept": "E3a: two clusters label the same images by different semantic groupings",
    "label_permutation": "E3b: each cluster relabels classes by its own seeded permutation",
    "cross_dataset": "E4a: clusters draw from different datasets of the same resolution",
    "combined": "E4b: 2 concept groups x C subclass (covariate) clusters",
    "feature_skew": "RND paper: same label distribution, per-group Gaussian noise or additive pattern",
    "parameter_shift": "MCDC synthetic tasks: per-cluster generating parameters (synthetic_* datasets)",
}

#: One partition kind's model (``DataSpec.partition_as``).
_Kind = TypeVar("_Kind", bound=Strict)


def _n_clusters(p: PartitionSpec | PluginPartition) -> int:
    """Number of ground-truth clusters a partition defines (before devices are known)."""
    if isinstance(p, (IIDPartition, DirichletPartition, QuantitySkewPartition)):
        return 1
    if isinstance(p, RotationPartition):
        return len(p.angles)
    if isinstance(p, SemanticConceptPartition):
        return 2
    if isinstance(p, CrossDatasetPartition):
        return 1 + len(p.others)
    if isinstance(p, CombinedPartition):
        return 2 * p.covariate_clusters
    return p.n_clusters


#: Partitions whose devices can draw overlapping samples (``data.overlap``): one pool or one class group
#: per device, with a fixed ``samples_per_client``.
OVERLAP_KINDS = ("iid", "feature_skew", "label_shift", "covariate_subclass", "rotation", "semantic_concept",
                 "label_permutation", "combined")


class DataSpec(Strict):
    """Dataset, partition and sizes of a federation (the scenario's ``data:``)."""

    dataset: str = "digits"
    root: str | None = None
    download: bool = False
    partition: PartitionField = Field(default_factory=IIDPartition)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    test_samples_per_client: int | None = Field(
        None, ge=1, le=limits.MAX_SAMPLES_PER_CLIENT,
        description="local test samples per device (drawn like test_fraction's); null: test_fraction decides")
    samples_per_client: int | None = Field(None, ge=1, le=limits.MAX_SAMPLES_PER_CLIENT)
    overlap: bool = Field(False, description="each device draws samples_per_client samples independently (a sample "
                                             "may sit on several devices): fleets larger than the dataset allows")
    clients_per_cluster: int | None = Field(None, ge=1, le=limits.MAX_DEVICES)
    sparsity: Literal["rich", "med", "sparse", "very_sparse", "super_sparse"] | None = None

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        if v not in DATASET_INFO and ":" not in v:
            raise ValueError(f"unknown dataset {v!r}; valid: {', '.join(DATASET_INFO)}, "
                             "or 'package.module:function' for your own")
        if ":" in v:
            try:
                dataset_info(v)  # imports the user's function and reads its Pool's shape and classes
            except DataError as err:
                raise ValueError(str(err)) from None
        return v

    @field_validator("partition", mode="before")
    @classmethod
    def _plugin_kind(cls, v: Any) -> Any:
        """A plug-in's kind is validated by its own class; an unknown kind is refused naming every kind."""
        if not isinstance(v, dict) or "kind" not in v:
            return v
        kind = v["kind"]
        if isinstance(kind, str) and kind in _BUILTIN_KINDS:
            return v
        if isinstance(kind, str) and kind in PARTITION_PLUGINS:
            return PARTITION_PLUGINS[kind].model_validate(v)
        tags = ", ".join(f"'{k}'" for k in [*_BUILTIN_KINDS, *PARTITION_PLUGINS])
        raise PydanticCustomError("union_tag_invalid", "Input tag '{tag}' found using 'kind' does not match any of "
                                  "the expected tags: {expected_tags}", {"tag": str(kind), "expected_tags": tags})

    @property
    def n_clusters(self) -> int:
        return _n_clusters(self.partition)

    def partition_as(self, kind: type[_Kind]) -> _Kind:
        """``partition``, typed as the kind a plan builds (``spec.partition_as(DirichletPartition)``).

        A plan receives only the spec of its own kind (``PLANS`` is keyed by ``kind``), so a mismatch
        is a programming error (TypeError), never a user error.
        """
        p = self.partition
        if not isinstance(p, kind):
            raise TypeError(f"expected a {kind.__name__}, got partition.kind {p.kind!r}")
        return p

    @property
    def cluster_size(self) -> int | None:
        """Clients per cluster required by ``clients_per_cluster`` or ``sparsity`` (None: free)."""
        return self.clients_per_cluster if self.clients_per_cluster is not None else (
            SPARSITY[self.sparsity] if self.sparsity else None)

    @model_validator(mode="after")
    def _combination(self) -> DataSpec:
        p, name = self.partition, self.dataset
        info = dataset_info(name)
        if self.sparsity and self.clients_per_cluster is not None and SPARSITY[self.sparsity] != self.clients_per_cluster:
            raise ValueError(
                f"sparsity={self.sparsity} means clients_per_cluster={SPARSITY[self.sparsity]} but clients_per_cluster="
                f"{self.clients_per_cluster}; set only one of them"
            )
        if info.synthetic != (p.kind == "parameter_shift"):
            if info.synthetic:
                raise ValueError(f"dataset {name!r} is generated per cluster; set partition.kind: parameter_shift")
            raise ValueError(f"partition.kind parameter_shift needs dataset synthetic_linear or synthetic_logistic; got {name!r}")
        if self.overlap:
            if self.samples_per_client is None:
                raise ValueError("overlap needs samples_per_client (how many samples each device draws); set it")
            if p.kind not in OVERLAP_KINDS:
                raise ValueError(f"overlap is not supported by partition.kind {p.kind}; valid with: "
                                 f"{', '.join(OVERLAP_KINDS)}")
        if isinstance(p, PluginPartition):
            p.check(self)
        for datasets, kinds in ((None if info.partitions is None else (name,), info.partitions),
                                (p.datasets if isinstance(p, PluginPartition) else None, (p.kind,))):
            if datasets is not None and kinds is not None and (name not in datasets or p.kind not in kinds):
                raise ValueError(f"dataset {' or '.join(datasets)} goes with partition.kind {' or '.join(kinds)} "
                                 f"(and only with it); got dataset {name!r} with partition.kind {p.kind!r}")
        if isinstance(p, PluginPartition):  # the checks below are the built-in kinds'
            return self
        if p.kind == "label_shift":
            if p.classes_per_cluster is not None and (name == "cifar100" or p.classes_per_cluster > info.num_classes):
                raise ValueError(f"partition.classes_per_cluster={p.classes_per_cluster} needs a dataset of at least that "
                                 f"many classes without superclasses; {name!r} has {info.num_classes}"
                                 + (" grouped into superclasses" if name == "cifar100" else ""))
            if p.classes_per_cluster is not None and not self.overlap and p.classes_per_cluster * p.n_clusters > info.num_classes:
                raise ValueError(f"partition.classes_per_cluster={p.classes_per_cluster} x n_clusters={p.n_clusters} "
                                 f"shares classes between groups, which needs overlap: true (with samples_per_client)")
            limit = 20 if name == "cifar100" else info.num_classes
            unit = "superclasses" if name == "cifar100" else "classes"
            if p.n_clusters > limit:
                raise ValueError(
                    f"partition.n_clusters={p.n_clusters} exceeds the {limit} {unit} of {name!r} for label_shift; "
                    f"use n_clusters <= {limit}"
                )
        if p.kind in ("covariate_subclass", "combined"):
            k = p.n_clusters if p.kind == "covariate_subclass" else p.covariate_clusters
            field = "n_clusters" if p.kind == "covariate_subclass" else "covariate_clusters"
            if name == "cifar100":
                if p.kind == "combined":
                    raise ValueError("partition.kind combined has no semantic mapping for 'cifar100'; use digits, mnist, fashion_mnist or cifar10")
                limit = 5
            elif name in SUPERCLASSES:
                limit = min(len(s) for s in SUPERCLASSES[name])
            else:
                raise ValueError(f"partition.kind {p.kind} has no superclass definition for {name!r}; use one of {', '.join(SUPERCLASSES)}, cifar100")
            if k > limit:
                raise ValueError(f"partition.{field}={k} exceeds the {limit} subclasses per superclass of {name!r}; use {field} <= {limit}")
        if p.kind in ("semantic_concept", "combined") and name not in SEMANTIC_MAPPINGS:
            raise ValueError(
                f"partition.kind {p.kind} has no semantic mapping for {name!r}; use one of {', '.join(sorted(SEMANTIC_MAPPINGS))}"
            )
        if p.kind == "label_permutation" and p.n_clusters > 1 and info.num_classes < 2:
            raise ValueError(f"label_permutation needs at least 2 classes; {name!r} has {info.num_classes}")
        if p.kind == "cross_dataset":
            for other in p.others:
                if other not in DATASET_INFO or DATASET_INFO[other].synthetic:
                    raise ValueError(f"partition.others: unknown image dataset {other!r}; valid: {', '.join(k for k, v in DATASET_INFO.items() if not v.synthetic)}")
                if DATASET_INFO[other].input_shape != info.input_shape and not (p.fallback and other == "mnist" and info.input_shape == (1, 28, 28)):
                    raise ValueError(
                        f"partition.others: {other!r} has input shape {DATASET_INFO[other].input_shape} but {name!r} has "
                        f"{info.input_shape}; cross_dataset needs one resolution (e.g. fashion_mnist with mnist or digits28)"
                    )
        if p.kind == "feature_skew" and p.mode in ("pattern", "smoothed_pattern"):
            d = 1
            for s in info.input_shape:
                d *= s
            if p.n_clusters > d:
                raise ValueError(f"partition.n_clusters={p.n_clusters} exceeds the {d} pixels of {name!r} for {p.mode} mode")
        return self
