"""Read scenario YAML, apply ``--set`` overrides and ``--seed``, and validate.

Nothing is written anywhere until this returns.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import yaml

from p2pfl.config.scenario import Scenario
from p2pfl.config.validation import parse_model, read_yaml
from p2pfl.errors import ConfigError
from p2pfl.protocols import get_protocol
from p2pfl.topology import TopologySpec

__all__ = ["load", "load_dict", "parse_override", "apply_overrides", "read_yaml"]


def parse_override(text: str) -> tuple[str, Any]:
    """``'a.b=3'`` -> ``('a.b', 3)``; the value is parsed as YAML (numbers, lists, booleans)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. protocol.rounds=5")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def apply_overrides(data: dict, overrides: Sequence[tuple[str, Any]]) -> dict:
    """A copy of ``data`` with each dotted key set to its value."""
    out = copy.deepcopy(data)
    for key, value in overrides:
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: '{'.'.join(parts[: i + 1])}' is not a mapping; got {child!r}")
            node = child
        node[parts[-1]] = value
    return out


def _resolve_file(ref: str, base: Path) -> Path:
    """A path as written, relative to the scenario's folder first, then to the working directory."""
    p = Path(ref)
    if p.is_absolute():
        return p
    for candidate in (base / p, Path.cwd() / p):
        if candidate.is_file():
            return candidate
    return base / p


def load_dict(data: Mapping[str, Any], *, source: str = "scenario", base_dir: Optional[Path] = None,
              overrides: Sequence[str] = (), seed: Optional[int] = None) -> Scenario:
    """Validate a scenario given as a mapping (the Python API's entry point)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of scenario fields; got {type(data).__name__}")
    base = Path.cwd() if base_dir is None else base_dir
    raw = dict(data)
    topo_source: str | Path = source
    topo_base = base
    if isinstance(raw.get("topology"), str):
        topo_path = _resolve_file(raw["topology"], base)
        if not topo_path.is_file():
            raise ConfigError(f"{source}: field 'topology': topology file {raw['topology']!r} not found "
                              f"(looked in {base} and {Path.cwd()}); check the path")
        topo_data = read_yaml(topo_path)
        if not isinstance(topo_data, dict):
            raise ConfigError(f"{topo_path}: expected a mapping of topology fields (kind, n, ...)")
        raw["topology"] = topo_data
        topo_source, topo_base = topo_path, topo_path.parent
    raw = apply_overrides(raw, [parse_override(o) for o in overrides])
    if seed is not None:
        raw["seed"] = seed
    if "topology" not in raw:
        raise ConfigError(f"{source}: field 'topology' is required; give a file (topologies/ring16.yaml) or a mapping")
    if not isinstance(raw["topology"], dict):
        raise ConfigError(f"{source}: field 'topology': expected a file path or a mapping; got {raw['topology']!r}")
    topology = parse_model(TopologySpec, raw["topology"], topo_source,
                           prefix="" if topo_source != source else "topology").with_base_dir(topo_base)
    proto = raw.get("protocol")
    if not isinstance(proto, dict) or "name" not in proto:
        raise ConfigError(f"{source}: field 'protocol.name' is required, e.g. protocol: {{name: gossip, rounds: 10}}")
    cls = get_protocol(proto["name"], str(source))
    params = parse_model(cls.Params, proto, source, prefix="protocol")
    raw["topology"], raw["protocol"] = topology, params
    return parse_model(Scenario, raw, source)


def load(path: str | Path, *, overrides: Sequence[str] = (), seed: Optional[int] = None) -> Scenario:
    """Read and validate a scenario YAML file."""
    path = Path(path)
    data = read_yaml(path)
    return load_dict(data if data is not None else {}, source=str(path), base_dir=path.parent,
                     overrides=overrides, seed=seed)
