"""Read scenario YAML, resolve ``extends:``, apply ``--unset`` / ``--set`` overrides and ``--seed``, and validate.

Nothing is written anywhere until this returns. ``extends: base.yaml`` (or a list of files,
applied in order; each relative to the file that names it, then to the working directory)
deep-merges the file's own keys over its bases: mappings merge key by key, any other value
replaces, and a key set to null (``~``) is removed. A base may extend another; a cycle is an
error. A base's ``topology:`` file is found relative to the base's folder, and an error in a
field a base wrote names the base. Overrides are dotted keys:

* ``--unset a.b`` removes the key (applied first, in order);
* ``--set a.b=VALUE`` sets it, VALUE parsed as YAML; ``--set a.b=~`` (YAML null) removes it;
* ``--set topology=FILE`` loads a topology file, resolved like the scenario's own
  ``topology:`` (relative to the scenario's folder, then to the working directory);
  ``topology.x`` keys edit the loaded file's content.

Sizes are checked against ``p2pfl.limits`` before anything is built.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel

from p2pfl import limits
from p2pfl.config.scenario import Scenario
from p2pfl.errors import ConfigError
from p2pfl.protocols import get_protocol
from p2pfl.protocols.base import ProtocolParams
from p2pfl.topology import TopologySpec
from p2pfl.validation import check_expansion, parse_model, read_yaml, require_mapping, short_repr

__all__ = ["load", "load_dict", "parse_override", "apply_overrides", "read_yaml"]

#: What an empty or non-mapping file is told it needs.
SCENARIO_NEEDS = ("at least 'topology' and 'protocol', e.g. topology: {kind: ring, n: 8} and "
                  "protocol: {name: gossip, rounds: 10} (see scenarios/quickstart.yaml)")
TOPOLOGY_NEEDS = "'kind' and its parameters, e.g. kind: ring and n: 16 (see topologies/)"

#: Most torch threads a scenario may ask for.
MAX_THREADS = 1024
#: Most base files one scenario may read through ``extends`` (chains and lists together).
MAX_BASES = 64
EXTENDS_EXAMPLE = "write e.g. extends: base.yaml, or a list [a.yaml, b.yaml]"

#: Key path (strings) -> (file that wrote it, that file's folder).
Origins = dict[tuple[str, ...], tuple[str, Path]]


def _check_key(key: str, flag: str) -> list[str]:
    parts = key.split(".")
    if not key or any(not p.strip() for p in parts):
        raise ConfigError(f"{flag} {key!r}: expected a dotted key such as protocol.rounds (no empty parts)")
    return [p.strip() for p in parts]


def parse_override(text: str) -> tuple[str, Any]:
    """``'a.b=3'`` -> ``('a.b', 3)``; the value is parsed as YAML (numbers, lists, booleans, ``~`` for null)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. protocol.rounds=5")
    key = ".".join(_check_key(key.strip(), "--set"))
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except Exception:  # not YAML (or a bad scalar such as 2024-13-45): keep the text as a string
        value = raw
    return key, value


def _parent(data: dict, parts: list[str], flag: str, create: bool, source: str = "") -> Optional[dict]:
    """The mapping holding ``parts[-1]`` (created on the way when ``create``), or None if a level is missing."""
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            if not create:
                return None
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            named = f"{source}: " if source else ""
            raise ConfigError(f"{named}{flag} {'.'.join(parts)}: '{where}' is not a mapping; got {short_repr(child)}; "
                              f"set '{where}' itself or a key that exists")
        node = child
    return node


def _set(data: dict, key: str, value: Any, source: str = "") -> None:
    parts = key.split(".")
    if value is None:  # YAML null: remove the key (absent if it was not there)
        node = _parent(data, parts, "--set", False, source)
        if node is not None:
            node.pop(parts[-1], None)
        return
    node = _parent(data, parts, "--set", True, source)
    assert node is not None
    node[parts[-1]] = value


def _unset(data: dict, key: str, source: str) -> None:
    parts = key.split(".")
    node = _parent(data, parts, "--unset", False, source)
    if node is None or parts[-1] not in node:
        where = ".".join(parts[:-1])
        keys = ", ".join(map(str, node)) if node else ""
        present = f" (keys under '{where}': {keys})" if where and keys else ""
        raise ConfigError(f"{source}: --unset {key}: the scenario has no key '{key}'{present}; check the spelling")
    del node[parts[-1]]


def apply_overrides(data: dict, overrides: Sequence[tuple[str, Any]]) -> dict:
    """A copy of ``data`` with each dotted key set to its value (None removes the key)."""
    out = copy.deepcopy(data)
    for key, value in overrides:
        _set(out, key, value)
    return out


def _resolve_file(ref: str, base: Path) -> Path:
    """A path as written, relative to the scenario's folder first, then to the working directory."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        return p
    candidates = (base / p, Path.cwd() / p)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return base / p


class _Topology:
    """Where the scenario's topology comes from: the file that wrote it (the scenario or a base), or a topology file."""

    def __init__(self, source: str, base: Path, origin: Optional[tuple[str, Path]] = None) -> None:
        self.scenario_source, self.scenario_base = source, base
        self.own_source, self.own_base = origin or (source, base)  # the file that wrote ``topology:``
        self.source: str | Path = source  # an inline mapping's errors name the scenario (``_Extends.blame`` the base)
        self.base = self.own_base
        self.from_file = False

    def replaced(self) -> None:
        """``topology`` itself was set or removed: it is the scenario's again (until a file is loaded)."""
        self.own_source, self.own_base = self.scenario_source, self.scenario_base
        self.source, self.base, self.from_file = self.scenario_source, self.scenario_base, False

    def inline(self, raw: dict) -> None:
        """Replace a ``topology: FILE`` by the file's content (a mapping is left as it is)."""
        ref = raw.get("topology")
        if not isinstance(ref, str):
            return
        src, folder = self.own_source, self.own_base
        if not ref.strip():
            raise ConfigError(f"{src}: field 'topology': empty file name; give a topology file "
                              "(topologies/ring16.yaml) or a mapping")
        path = _referenced_file(ref, folder, src, "topology", "topology file")
        raw["topology"] = require_mapping(read_yaml(path), path, "topology", TOPOLOGY_NEEDS)
        self.source, self.base, self.from_file = path, path.parent, True


def _extends_refs(value: Any, source: str) -> list[str]:
    """The file names an ``extends:`` value lists (one name, or a list of them)."""
    if value is None:
        return []
    refs = value if isinstance(value, list) else [value]
    if not refs or not all(isinstance(r, str) for r in refs):
        raise ConfigError(f"{source}: field 'extends': expected a file name or a non-empty list of file names; "
                          f"got {short_repr(value)}; {EXTENDS_EXAMPLE}")
    for ref in refs:
        if not ref.strip():
            raise ConfigError(f"{source}: field 'extends': empty file name; {EXTENDS_EXAMPLE}")
    return refs


def _base_file(ref: str, folder: Path, source: str) -> Path:
    """A base named by ``extends``: relative to the naming file's folder, then to the working directory."""
    return _referenced_file(ref, folder, source, "extends", "base file", kind="scenario")


def _referenced_file(ref: str, folder: Path, source: str | Path, field: str, what: str,
                     kind: str = "topology") -> Path:
    """A YAML file that ``field`` of ``source`` names, resolved like ``_resolve_file``; one-line errors."""
    try:
        path = _resolve_file(ref, folder)
        path.is_dir()
    except (OSError, ValueError) as err:
        raise ConfigError(f"{source}: field '{field}': cannot use {short_repr(ref)} as a file name "
                          f"({getattr(err, 'strerror', None) or err}); check the path") from None
    if path.is_dir():
        raise ConfigError(f"{source}: field '{field}': {ref!r} is a directory ({path}); give a {kind} YAML file")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{source}: field '{field}': {ref!r} is not a regular file; give a {kind} YAML file")
    if not path.is_file():
        raise ConfigError(f"{source}: field '{field}': {what} {ref!r} not found "
                          f"(looked in {folder} and {Path.cwd()}); check the path")
    return path


class _Attributed(ConfigError):
    """A ConfigError that already names the file to fix (``_Extends.blame`` leaves it as it is)."""


class _Extends:
    """Resolves ``extends:`` into one merged mapping, remembering which file wrote each key."""

    def __init__(self) -> None:
        self.bases: list[str] = []
        self.origins: Origins = {}

    def layers(self, data: Mapping[str, Any], source: str, folder: Path,
               chain: tuple[tuple[Optional[Path], str], ...]) -> list[tuple[dict, str, Path]]:
        """``data`` without ``extends``, preceded by its bases' layers (each its own data, file, folder), in merge order."""
        own = dict(data)
        refs = _extends_refs(own.pop("extends", None), source)
        out: list[tuple[dict, str, Path]] = []
        for ref in refs:
            path = _base_file(ref, folder, source)
            key = path.resolve()
            if any(k == key for k, _ in chain):
                names = [name for _, name in chain[[k for k, _ in chain].index(key):]]
                raise ConfigError(f"{source}: field 'extends': cycle {' -> '.join([*names, str(path)])}; "
                                  "remove one of these extends")
            if len(self.bases) >= MAX_BASES:
                raise ConfigError(f"{source}: field 'extends': more than {MAX_BASES} base files in all; "
                                  "extend fewer files")
            self.bases.append(str(path))
            raw = require_mapping(read_yaml(path), path, "scenario", SCENARIO_NEEDS)
            out += self.layers(raw, str(path), path.parent, (*chain, (key, str(path))))
        out.append((own, source, folder))
        return out

    def merge(self, layers: list[tuple[dict, str, Path]]) -> dict:
        """Deep-merge the layers in order (mappings merge, other values replace, null removes)."""
        merged: dict = {}
        for data, source, folder in layers:
            self._merge(merged, data, (), (source, folder))
        return merged

    def _merge(self, into: dict, over: Mapping[Any, Any], prefix: tuple[str, ...], origin: tuple[str, Path]) -> None:
        for key, value in over.items():
            path = (*prefix, str(key))
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                self._merge(into[key], value, path, origin)
                continue
            if isinstance(into.get(key), dict):
                self.forget(path)  # a mapping replaced: the keys under it go too
            else:
                self.origins.pop(path, None)
            if value is None:
                into.pop(key, None)
            else:
                into[key] = copy.deepcopy(value)
                self.origins[path] = origin

    def forget(self, path: tuple[str, ...]) -> None:
        """Drop what is known about ``path`` and the keys under it."""
        n = len(path)
        for known in [k for k in self.origins if k[:n] == path]:
            del self.origins[known]

    def origin(self, field: str) -> Optional[tuple[str, Path]]:
        """The file that wrote a dotted field (or the nearest enclosing key), if known."""
        parts = tuple(re.findall(r"[^.\[\]]+", field))
        while parts:
            if parts in self.origins:
                return self.origins[parts]
            parts = parts[:-1]
        return None

    def blame(self, err: ConfigError, source: str) -> ConfigError:
        """``err`` naming the base that wrote the field it is about (or the base it was raised in)."""
        msg = str(err)
        if isinstance(err, _Attributed):
            named = msg.split(": ", 1)[0]
            return err if named == source else _Attributed(f"{named} (base of {source}){msg[len(named):]}")
        for base in self.bases:
            if base != source and msg.startswith(f"{base}: "):
                return ConfigError(f"{base} (base of {source}){msg[len(base):]}")
        match = re.match(re.escape(source) + r": (?:unknown )?field '([^']*)'", msg)
        origin = self.origin(match.group(1)) if match else None
        if origin is None or origin[0] == source:
            return err
        return ConfigError(f"{origin[0]} (base of {source}){msg[len(source):]}")


def _protocol_params(raw: dict, source: str, original: Any, ext: Optional[_Extends] = None) -> ProtocolParams:
    proto = raw.get("protocol")
    example = "protocol: {name: gossip, rounds: 10} (p2pfl list protocols)"
    if proto is None:
        raise ConfigError(f"{source}: field 'protocol' is required; add it, e.g. {example}")
    if not isinstance(proto, dict):
        raise ConfigError(f"{source}: field 'protocol': expected a mapping with a 'name'; got {short_repr(proto)}; "
                          f"write it as {example}")
    if proto.get("name") is None:
        raise ConfigError(f"{source}: field 'protocol.name' is required, e.g. {example}")
    name = proto["name"]
    if not isinstance(name, str):
        raise ConfigError(f"{source}: field 'protocol.name': expected a protocol name (a string); got {short_repr(name)}; "
                          "write e.g. name: gossip (p2pfl list protocols)")
    cls = get_protocol(name, str(source))
    unknown = [k for k in proto if k not in cls.Params.model_fields]
    if ext is not None and unknown:  # keys a base wrote for the protocol it chose
        named_in = ext.origin("protocol.name")
        inherited = [k for k in unknown if ext.origin(f"protocol.{k}") not in (None, named_in)]
        if inherited:  # named by the file that chose the protocol: the fix goes there
            key = str(inherited[0])
            base = (ext.origin(f"protocol.{key}") or (source, Path()))[0]
            chose = (named_in or (source, Path()))[0]
            raise _Attributed(f"{chose}: field 'protocol': protocol '{name}' has no parameter '{key}' (set in "
                              f"{base} for another protocol); remove it with '{key}: ~' under 'protocol:' "
                              f"or --unset protocol.{key}")
    if isinstance(original, str) and original != name and unknown:
        fields = ", ".join(f"'{k}'" for k in unknown)
        noun, pronoun = ("parameter", "it") if len(unknown) == 1 else ("parameters", "them")
        fix = " ".join(f"--unset protocol.{k}" for k in unknown)
        raise _Attributed(f"{source}: field 'protocol': protocol '{name}' has no {noun} {fields} (left over from "
                          f"protocol '{original}'); remove {pronoun} with {fix}")
    return parse_model(cls.Params, proto, source, prefix="protocol")


def _unbounded_ints(model: BaseModel, prefix: str) -> Iterator[tuple[str, int]]:
    """Integer fields (dotted path, value) of ``model`` and its sub-models without their own upper bound."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, BaseModel):
            yield from _unbounded_ints(value, path)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from _unbounded_ints(item, f"{path}[{i}]")
        elif (isinstance(value, int) and not isinstance(value, bool) and name != "seed"
              and not any(hasattr(m, "le") or hasattr(m, "lt") for m in info.metadata)):
            yield path, value


def _model_size(sc: Scenario) -> tuple[str, int]:
    """The model the run builds (``auto`` resolved as ``build_model`` does) and its parameter count."""
    from p2pfl.data.datasets import dataset_info
    from p2pfl.learning.models import resolve_model_name

    data = sc.data
    info = dataset_info(data.dataset)
    shape = tuple(info.input_shape)
    classes = info.num_classes
    n_features = getattr(data.partition, "n_features", None)
    if info.synthetic and isinstance(n_features, int):
        shape = (n_features,)
    name = resolve_model_name(sc.model.name, shape, default=info.model)
    return name, limits.model_parameters(name, shape, classes, sc.model.hidden)


def _check_sizes(sc: Scenario, source: str) -> None:
    """Refuse what cannot run on this machine before anything is allocated (see ``p2pfl.limits``)."""
    if sc.threads > MAX_THREADS:
        raise ConfigError(f"{source}: field 'threads': at most {MAX_THREADS:,} threads; got {sc.threads:,}; "
                          "use the number of CPU cores or fewer")
    for path, value in _unbounded_ints(sc, ""):
        if value > limits.MAX_COUNT:
            raise ConfigError(f"{source}: field '{path}': at most {limits.MAX_COUNT:,} (p2pfl.limits.MAX_COUNT); "
                              f"got {value:,}; use a smaller value")
    n = sc.topology.n_devices
    if n is None:  # a file kind: the device count is known once the file is read
        return
    name, params = _model_size(sc)
    models = n * limits.MODEL_COPIES + int(getattr(sc.protocol, "n_clusters", 1) or 1)
    need = models * params * 4.0
    what = f"{n:,} devices with a {name} model of about {params:,} parameters"
    data = sc.data
    if data.dataset.startswith("synthetic"):
        from p2pfl.data.synthetic import DEFAULT_SAMPLES

        d = getattr(data.partition, "n_features", 1)
        k = getattr(data.partition, "n_clusters", 1)
        n_train = data.samples_per_client or DEFAULT_SAMPLES
        n_test = data.test_samples_per_client or n_train * data.test_fraction / (1 - data.test_fraction)
        need += n * (n_train + n_test) * d * 4.0 + k * d * d * 8.0
        what += f" and {n_train + n_test:,.0f} generated samples of {d} features each"
    elif data.overlap and data.samples_per_client:  # shards may hold more samples than the pool: count them
        from p2pfl.data.datasets import dataset_info

        d = math.prod(dataset_info(data.dataset).input_shape)
        per = data.samples_per_client + (data.test_samples_per_client
                                         or data.samples_per_client * data.test_fraction / (1 - data.test_fraction))
        need += n * per * d * 4.0
        what += f" and {per:,.0f} samples of {d} features each (data.overlap)"
    try:
        limits.check_fits(need, what + " would", "use fewer devices (topology n), a smaller model "
                          "(model.hidden) or fewer samples (data.samples_per_client, data.test_fraction)")
    except ValueError as err:
        raise ConfigError(f"{source}: the scenario is too large for this machine: {err}") from None


def load_dict(data: Mapping[str, Any], *, source: str = "scenario", base_dir: Optional[Path] = None,
              overrides: Sequence[str] = (), seed: Optional[int] = None, unset: Sequence[str] = ()) -> Scenario:
    """Validate a scenario given as a mapping (the Python API's entry point).

    ``extends`` is resolved first; ``unset`` lists dotted keys to remove (first), ``overrides``
    ``KEY=VALUE`` strings to set (a null value removes the key); relative ``extends`` and
    ``topology`` files are looked up in ``base_dir`` (default: the working directory), then
    in the working directory.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of scenario fields; got {type(data).__name__}; "
                          f"a scenario needs {SCENARIO_NEEDS}")
    check_expansion(data, source)
    base = Path.cwd() if base_dir is None else Path(base_dir)
    sets = [parse_override(o) for o in overrides]
    removals = [".".join(_check_key(str(k).strip(), "--unset")) for k in unset]
    ext: Optional[_Extends] = None
    if "extends" in data:
        ext = _Extends()
        try:
            root = _as_file(source)
            raw = ext.merge(ext.layers(data, source, base, ((root, source),)))
            check_expansion(raw, source)
        except ConfigError as err:
            raise ext.blame(err, source) from None
        try:
            return _validate(raw, source, base, sets, removals, seed, ext)
        except ConfigError as err:
            raise ext.blame(err, source) from None
    return _validate(copy.deepcopy(dict(data)), source, base, sets, removals, seed, None)


def _as_file(source: str) -> Optional[Path]:
    """``source`` resolved if it names an existing file (so a base extending it is a cycle), else None."""
    try:
        return Path(source).resolve() if Path(source).is_file() else None
    except (OSError, ValueError):
        return None


def _validate(raw: dict, source: str, base: Path, sets: Sequence[tuple[str, Any]], removals: Sequence[str],
              seed: Optional[int], ext: Optional[_Extends]) -> Scenario:
    """Apply the overrides to the (merged) data and validate it."""
    original = raw.get("protocol", {}).get("name") if isinstance(raw.get("protocol"), dict) else None
    topo = _Topology(source, base, ext.origins.get(("topology",)) if ext else None)
    edits: list[tuple[str, Any, bool]] = [(k, None, True) for k in removals] + [(k, v, False) for k, v in sets]
    for key, value, removal in edits:
        if key.startswith("topology."):
            topo.inline(raw)  # edit the loaded file's content
        if removal:
            _unset(raw, key, source)
        else:
            _set(raw, key, value, source)
        if ext is not None:  # the command line wrote it: errors about it name the scenario
            ext.forget(tuple(key.split(".")))
            ext.origins[tuple(key.split("."))] = (source, base)
        if key == "topology":
            topo.replaced()
    topo.inline(raw)
    if seed is not None:
        raw["seed"] = seed
        if ext is not None:
            ext.origins[("seed",)] = (source, base)
    if "topology" not in raw:
        raise ConfigError(f"{source}: field 'topology' is required; give a file (topologies/ring16.yaml) or a mapping")
    if not isinstance(raw["topology"], dict):
        raise ConfigError(f"{source}: field 'topology': expected a file path or a mapping; got {short_repr(raw['topology'])}; "
                          "write e.g. topology: {kind: ring, n: 8}")
    prefix = "" if topo.from_file else "topology"
    topology = parse_model(TopologySpec, raw["topology"], topo.source, prefix=prefix).with_base_dir(topo.base)
    params = _protocol_params(raw, source, original, ext)
    raw["topology"], raw["protocol"] = topology, params
    sc = parse_model(Scenario, raw, source)
    if sc.dynamics is not None:  # trace files are found relative to the scenario's folder
        sc = sc.model_copy(update={"dynamics": sc.dynamics.with_base_dir(base)})
    _check_sizes(sc, source)
    return sc


def load(path: str | Path, *, overrides: Sequence[str] = (), seed: Optional[int] = None,
         unset: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario YAML file."""
    path = Path(path)
    data = require_mapping(read_yaml(path), path, "scenario", SCENARIO_NEEDS)
    return load_dict(data, source=str(path), base_dir=path.parent, overrides=overrides, seed=seed, unset=unset)
