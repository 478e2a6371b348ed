"""Dataset loaders and the dataset registry.

Every loader returns a :class:`Pool`: the official train split (source of the
training shards) and the official test split (source of the local test sets),
as uint8 (or float32) arrays of shape ``(n, C, H, W)`` plus int64 labels.
Nothing is downloaded unless the user sets ``download: true``; loaded pools are
cached in memory per process, keyed by the resolved directory.
"""

from __future__ import annotations

import functools
import gzip
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2pfl.errors import DataError
from p2pfl.plugins import GROUPS, Registry, import_object

__all__ = [
    "Pool",
    "DatasetInfo",
    "DATASETS",
    "DATASET_INFO",
    "load_dataset",
    "dataset_info",
    "read_idx",
    "FASHION_MNIST_SYSTEM_DIR",
    "MNIST_SYSTEM_DIR",
    "IDX_FILES",
]

FASHION_MNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"
MNIST_SYSTEM_DIR = "/usr/share/datasets/mnist"
# The four files of an MNIST-style dataset (each may also be uncompressed).
IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
DEFAULT_DOWNLOAD_ROOT = "~/.cache/p2pfl/data"


@dataclass(frozen=True, eq=False)
class Pool:
    """A loaded dataset: official train and test splits.

    ``x`` arrays are ``(n, C, H, W)`` (images) or ``(n, D)`` (vectors); the
    float value a model sees is ``x / scale``.  ``fine_to_coarse`` maps each
    class to its official superclass (CIFAR-100 only).
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    scale: float = 255.0
    fine_to_coarse: np.ndarray | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.train_x.shape[1:])


@dataclass(frozen=True)
class DatasetInfo:
    """Static facts the schema checks before anything is loaded.

    ``model``: the model ``model.name: auto`` picks for this dataset (None: by input shape, see
    ``p2pfl.learning.models.resolve_model_name``). ``partitions``: the partition kinds that build it
    (None: every kind that splits a :class:`Pool`); a plug-in dataset built by its own partition kind
    names that kind here.
    """

    description: str
    num_classes: int
    input_shape: tuple[int, ...]
    synthetic: bool = False
    model: str | None = None
    partitions: tuple[str, ...] | None = None


#: Entry-point group of plug-in datasets (``p2pfl.plugins``): a name -> a loader ``function(root) -> Pool``
#: (like a ``package.module:function`` dataset), or a :class:`DatasetInfo` of a dataset that its own
#: partition kind builds.
GROUP = GROUPS["datasets"]

_BUILTIN_INFO: dict[str, DatasetInfo] = {
    "digits": DatasetInfo("scikit-learn 8x8 digits (1797 images, ships with scikit-learn; every 5th image is the test pool)", 10, (1, 8, 8)),
    "digits28": DatasetInfo("scikit-learn digits upsampled (bilinear) to 28x28, the offline stand-in for MNIST", 10, (1, 28, 28)),
    "mnist": DatasetInfo("MNIST 28x28 handwritten digits (IDX files)", 10, (1, 28, 28)),
    "fashion_mnist": DatasetInfo("Fashion-MNIST 28x28 clothing images (IDX files)", 10, (1, 28, 28)),
    "cifar10": DatasetInfo("CIFAR-10 32x32 RGB, 10 classes (python pickle batches)", 10, (3, 32, 32)),
    "cifar100": DatasetInfo("CIFAR-100 32x32 RGB, 100 classes in 20 superclasses (python pickle batches)", 100, (3, 32, 32)),
    "synthetic_linear": DatasetInfo("MCDC synthetic linear regression: per-cluster generating parameters, vectors (n, D)", 0, (10,), True),
    "synthetic_logistic": DatasetInfo("MCDC synthetic logistic regression: per-cluster generating parameters, 2 classes", 2, (10,), True),
}


def _plugin_info(name: str, obj: object) -> DatasetInfo:
    """A plug-in dataset's facts: its DatasetInfo, or those of the Pool its loader returns (``root=None``)."""
    if isinstance(obj, DatasetInfo):
        return obj
    if not callable(obj):
        raise DataError(f"plug-in dataset {name!r} ({GROUP}) is neither a DatasetInfo nor a function of root "
                        "returning a Pool")
    return _pool_info(f"plug-in dataset {name}", _checked_pool(name, obj(None)))


#: Every dataset name -> its facts: the built-in ones, then plug-ins (read when first asked for).
DATASET_INFO: Registry[DatasetInfo] = Registry(_BUILTIN_INFO, GROUP, _plugin_info)


class _Descriptions(Mapping[str, str]):
    """``DATASETS``: every dataset name -> its one-line description (plug-ins read when listed)."""

    def __getitem__(self, name: str) -> str:
        return DATASET_INFO[name].description

    def __iter__(self) -> Iterator[str]:
        return iter(DATASET_INFO)

    def __len__(self) -> int:
        return len(DATASET_INFO)

    def __contains__(self, name: object) -> bool:
        return name in DATASET_INFO


DATASETS: Mapping[str, str] = _Descriptions()


def _user_loader(name: str) -> Callable[..., Pool]:
    """The function a ``package.module:function`` dataset name points to; DataError (one line) otherwise."""
    try:
        fn = import_object(name)
    except ValueError as err:
        raise DataError(str(err)) from None
    if not callable(fn):
        raise DataError(f"{name!r} is not a function; name a function of root returning a Pool")
    return fn


def _checked_pool(name: str, pool: object) -> Pool:
    if not isinstance(pool, Pool):
        raise DataError(f"dataset {name!r} returned {type(pool).__name__}, not a p2pfl.data.datasets.Pool")
    return pool


@functools.cache
def _user_pool(name: str, root: str | None) -> Pool:
    return _checked_pool(name, _user_loader(name)(root))


def _pool_info(description: str, pool: Pool) -> DatasetInfo:
    return DatasetInfo(description, pool.num_classes, pool.input_shape)


def dataset_info(name: str) -> DatasetInfo:
    """Facts about dataset ``name``: the table's (plug-ins included), or, for a user dataset
    ``package.module:function``, read from the Pool its function returns (called once per process with
    ``root=None``)."""
    if name in DATASET_INFO:
        try:
            return DATASET_INFO[name]
        except ValueError as err:  # a plug-in whose module:object cannot be imported
            raise DataError(str(err)) from None
    if ":" not in name:
        raise DataError(f"unknown dataset {name!r}; valid: {', '.join(DATASET_INFO)}, "
                        "or 'package.module:function' for your own")
    return _pool_info(f"user dataset {name}", _user_pool(name, None))


def load_dataset(name: str, root: str | None = None, download: bool = False) -> Pool:
    """Load dataset ``name`` (see :data:`DATASETS`, or ``package.module:function``: a function of
    ``root`` returning a :class:`Pool`); raise DataError if it cannot."""
    if ":" in name:
        return _user_pool(name, root)
    if name in _LOADERS:
        return _LOADERS[name](root, download)
    target = DATASET_INFO.plugins().get(name)
    if target is not None:
        info = dataset_info(name)
        if info.partitions is not None:
            raise DataError(f"dataset {name!r} has no pool of samples: partition.kind {' or '.join(info.partitions)} "
                            "builds it")
        return _user_pool(target, root)
    raise DataError(f"unknown dataset {name!r}; valid: {', '.join(n for n in DATASETS if n in _LOADERS)}")


# ---------------------------------------------------------------- digits
@functools.cache
def _digits() -> Pool:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.astype(np.uint8)[:, None, :, :]  # values 0..16
    y = d.target.astype(np.int64)
    test = np.arange(len(y)) % 5 == 4  # deterministic hold-out: every 5th image
    return Pool("digits", x[~test], y[~test], x[test], y[test], 10, scale=16.0)


def _load_digits(root: str | None, download: bool) -> Pool:
    return _digits()


@functools.cache
def _digits28() -> Pool:
    import torch
    import torch.nn.functional as F

    d = _digits()

    def up(x: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(x.astype(np.float32) / d.scale)
        return F.interpolate(t, size=(28, 28), mode="bilinear", align_corners=False).clamp_(0, 1).numpy()

    return Pool("digits28", up(d.train_x), d.train_y, up(d.test_x), d.test_y, 10, scale=1.0)


def _load_digits28(root: str | None, download: bool) -> Pool:
    return _digits28()


# ---------------------------------------------------------------- IDX (MNIST, Fashion-MNIST)
def read_idx(path: str | Path) -> np.ndarray:
    """Parse an IDX file (gzip or raw) of unsigned bytes into an array of its shape."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read IDX file {path}: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path} is not an IDX file (bad magic number)")
    if raw[2] != 0x08:
        raise DataError(f"{path}: only unsigned-byte IDX data (type 0x08) is supported; got type 0x{raw[2]:02x}")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataError(f"{path}: header says {dims} ({int(np.prod(dims))} bytes) but holds {data.size} bytes; the file is truncated")
    return data.reshape(dims)


def _find_idx_dir(candidates: list[Path]) -> Path | None:
    for d in candidates:
        if all((d / f).is_file() or (d / f[:-3]).is_file() for f in IDX_FILES):
            return d
    return None


def _idx_file(d: Path, name: str) -> Path:
    return d / name if (d / name).is_file() else d / name[:-3]


@functools.cache
def _read_idx_dir(directory: str, name: str) -> Pool:
    d = Path(directory)
    tr_x, tr_y, te_x, te_y = (read_idx(_idx_file(d, f)) for f in IDX_FILES)
    for x, y, split in ((tr_x, tr_y, "train"), (te_x, te_y, "t10k")):
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(f"{d}: {split} images {x.shape} and labels {y.shape} do not match")
    pool = Pool(name, tr_x[:, None], tr_y.astype(np.int64), te_x[:, None], te_y.astype(np.int64), 10)
    if pool.train_y.max(initial=0) >= 10 or pool.test_y.max(initial=0) >= 10:
        raise DataError(f"{d}: labels must lie in 0..9")
    return pool


def _idx_loader(name: str, system_dir: str, tv_folder: str, tv_class: str, package: str):
    def load(root: str | None, download: bool) -> Pool:
        if root is not None:
            base = Path(root).expanduser()
            candidates = [base, base / tv_folder / "raw"]
        else:
            base = Path(DEFAULT_DOWNLOAD_ROOT).expanduser()
            candidates = [Path(system_dir)] + ([base / tv_folder / "raw"] if download else [])
        found = _find_idx_dir(candidates)
        if found is None and download:
            _torchvision_download(tv_class, base)
            found = _find_idx_dir(candidates)
        if found is None:
            where = " or ".join(str(c) for c in candidates)
            raise DataError(
                f"{name}: expected {', '.join(IDX_FILES)} in {where}; "
                f"{package}set data.root to the folder holding them, or set data.download: true"
            )
        return _read_idx_dir(str(found.resolve()), name)

    return load


def _torchvision_download(cls_name: str, root: Path) -> None:
    """Fetch with torchvision into ``root`` (only when the user set download: true)."""
    import torchvision.datasets as tvd

    cls = getattr(tvd, cls_name)
    try:
        root.mkdir(parents=True, exist_ok=True)
        for train in (True, False):
            cls(str(root), train=train, download=True)
    except Exception as err:  # network errors come in many types
        raise DataError(f"download of {cls_name} into {root} failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None


# ---------------------------------------------------------------- CIFAR (python pickle batches)
# The official CIFAR "python version" is a set of pickle files; we read them
# only from files the user placed on disk (or torchvision downloaded on
# request), and through an unpickler that admits nothing but the numpy array
# constructors those files need, so a tampered file cannot run code.
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR batch")


def _read_batch(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="latin1").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as err:
        raise DataError(f"cannot read CIFAR batch {path}: {err}") from None
    if not isinstance(obj, dict) or "data" not in obj:
        raise DataError(f"{path} is not a CIFAR python batch (no 'data' entry)")
    return obj


def _cifar_images(data, path: Path) -> np.ndarray:
    a = np.asarray(data, dtype=np.uint8)
    if a.ndim != 2 or a.shape[1] != 3072:
        raise DataError(f"{path}: 'data' must be (n, 3072) uint8; got {a.shape}")
    return a.reshape(-1, 3, 32, 32)


CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
CIFAR100_FILES = ("train", "test")


@functools.cache
def _read_cifar10(directory: str) -> Pool:
    d = Path(directory)
    xs, ys = [], []
    for f in CIFAR10_FILES:
        b = _read_batch(d / f)
        xs.append(_cifar_images(b["data"], d / f))
        ys.append(np.asarray(b["labels"], dtype=np.int64))
    pool = Pool("cifar10", np.concatenate(xs[:5]), np.concatenate(ys[:5]), xs[5], ys[5], 10)
    if len(pool.train_x) != len(pool.train_y) or len(pool.test_x) != len(pool.test_y):
        raise DataError(f"{d}: image and label counts differ")
    return pool


@functools.cache
def _read_cifar100(directory: str) -> Pool:
    d = Path(directory)
    parts = []
    for f in CIFAR100_FILES:
        b = _read_batch(d / f)
        parts.append((_cifar_images(b["data"], d / f), np.asarray(b["fine_labels"], np.int64), np.asarray(b["coarse_labels"], np.int64)))
    f2c = np.full(100, -1, dtype=np.int64)
    for _, fine, coarse in parts:
        f2c[fine] = coarse
        if np.any(f2c[fine] != coarse):
            raise DataError(f"{d}: a fine label maps to two coarse labels")
    (trx, try_, _), (tex, tey, _) = parts
    return Pool("cifar100", trx, try_, tex, tey, 100, fine_to_coarse=f2c)


def _cifar_loader(name: str, folder: str, files: tuple[str, ...], reader, tv_class: str):
    def load(root: str | None, download: bool) -> Pool:
        base = Path(root if root is not None else DEFAULT_DOWNLOAD_ROOT).expanduser()
        candidates = [base / folder, base]
        found = next((c for c in candidates if all((c / f).is_file() for f in files)), None)
        if found is None and download:
            _torchvision_download(tv_class, base)
            found = next((c for c in candidates if all((c / f).is_file() for f in files)), None)
        if found is None:
            raise DataError(
                f"{name}: expected {', '.join(files)} in {base / folder}; "
                "set data.root to the folder holding them, or set data.download: true"
            )
        return reader(str(found.resolve()))

    return load


def _synthetic(root: str | None, download: bool) -> Pool:  # pragma: no cover - guarded by the schema
    raise DataError("synthetic datasets are generated per cluster; use partition.kind: parameter_shift")


_LOADERS = {
    "digits": _load_digits,
    "digits28": _load_digits28,
    "mnist": _idx_loader("mnist", MNIST_SYSTEM_DIR, "MNIST", "MNIST", ""),
    "fashion_mnist": _idx_loader(
        "fashion_mnist", FASHION_MNIST_SYSTEM_DIR, "FashionMNIST", "FashionMNIST", "apt-get install dataset-fashion-mnist, or "
    ),
    "cifar10": _cifar_loader("cifar10", "cifar-10-batches-py", CIFAR10_FILES, _read_cifar10, "CIFAR10"),
    "cifar100": _cifar_loader("cifar100", "cifar-100-python", CIFAR100_FILES, _read_cifar100, "CIFAR100"),
    "synthetic_linear": _synthetic,
    "synthetic_logistic": _synthetic,
}

# Offline stand-ins used by cross_dataset when a dataset's files are missing.
FALLBACKS = {"mnist": "digits28"}


def clear_cache() -> None:
    """Drop every cached pool (tests use it to re-read fixtures)."""
    for fn in (_digits, _digits28, _read_idx_dir, _read_cifar10, _read_cifar100):
        fn.cache_clear()

