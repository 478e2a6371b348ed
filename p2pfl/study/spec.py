"""A study: one base scenario swept over variants, a grid of settings and seeds.

YAML layout (``base`` and ``seeds`` are required)::

    name: gossip_vs_fedavg             # default: the file's name; the default output folder is runs/<name>
    base: ../quickstart.yaml           # a scenario file (relative to the study file, then the cwd) or a mapping
    unset: [protocol.reply_timeout_s]  # dotted keys removed from the base for every cell
    set: {protocol.rounds: 5}          # dotted keys set for every cell
    variants:                          # named sets of edits (optional); a variant may name its own
      gossip: {}                       #   base: file (a scenario that extends the common one, say)
      fedavg:
        unset: [protocol.mode, protocol.exchange]
        set: {protocol.name: fedavg, topology.servers: [{attach: all}]}
        cell_time: 20m                 #   a planning guess of one cell's wall time, for --budget (optional)
    grid: {training.lr: [0.01, 0.05]}  # every combination of the listed values (optional)
    zip: {a.b: [1, 2], c.d: [3, 4]}    # paired values, one more grid axis (optional; equal lengths;
                                       # a key may repeat a value, the positions must differ)
    seeds: [0, 1, 2]                   # or {start: 0, stop: 3}
    exclude:                           # cells not run (optional): each entry drops the cells that match
      - {variant: fedavg, training.lr: 0.05}  # all of its fields (a variant and/or grid or zip values)
    verify: {rtol: 1.0e-9, atol: 0}    # how closely `p2pfl archive verify --study FILE` wants a re-run's
                                       # summary numbers (optional; default: byte for byte); changes no cell

Keys are dotted exactly as ``--set`` / ``--unset`` take them, and a value replaces the
field whole (a mapping is not merged); a null value (``~``) removes the key. A cell is
exactly the command line ``p2pfl run BASE --unset U... --set S... --seed N`` with U the
study's ``unset`` then the variant's, and S the study's ``set``, the variant's ``set``,
then the cell's grid and zip values (as on the command line, removals come first;
``set: {key: ~}`` removes a key after the sets before it).

Cells are variants (in file order) x grid combinations (the last key varies fastest)
x zip positions x seeds, less the cells an ``exclude`` entry matches; with ``order: seeds`` the seeds
vary slowest instead (every cell of the first seed, then of the next), the same cells. A cell's id, e.g.
``fedavg__training.lr=0.01__seed0`` (no variant part without variants), names its run
directory; a value that is not a plain number or word is written as a slug plus a short hash.
Every cell is validated when the study is loaded, before anything runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from p2pfl.errors import ConfigError, UserError
from p2pfl.study.times import parse_duration
from p2pfl.validation import Strict, parse_model, read_yaml, require_mapping

if TYPE_CHECKING:
    from p2pfl.config.scenario import Scenario

__all__ = ["Study", "Cell", "StudySpec", "Variant", "VerifySpec", "SeedRange", "MAX_CELLS", "load_study",
           "load_study_dict", "expand", "cell_id", "override_text"]

#: Most cells one study may expand to (each is validated when the study is loaded).
MAX_CELLS = 10_000
#: Longest cell id (a run directory's name, plus its temporary sibling's suffix, must fit 255 bytes).
MAX_ID = 200

STUDY_NEEDS = "'base' (a scenario file or mapping) and 'seeds', e.g. base: ../quickstart.yaml and seeds: [0, 1, 2]"

_KEY = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_PLAIN = re.compile(r"[A-Za-z0-9_.+-]{1,40}")


def _dotted_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ValueError("expected a dotted key such as protocol.rounds (letters, digits, _ and dots; "
                         f"no empty parts); got {key!r}; write it as on --set")
    return key


def _name(text: str) -> str:
    if not _NAME.fullmatch(text) or len(text) > 64:
        raise ValueError("expected a name of at most 64 letters, digits, '_', '.', '+' or '-', starting with a "
                         f"letter or digit (it names folders); got {text!r}; rename it")
    return text


def _json_value(value: Any, where: str = "value") -> Any:
    """``value`` as JSON holds it (it goes into ``cell.json``; a tuple becomes a list); else ValueError."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number; got {value!r}; remove it")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, where) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError(f"{where}: write every mapping key as a string; got {value!r}")
        return {k: _json_value(v, where) for k, v in value.items()}
    raise ValueError(f"{where} must be null, true/false, a number, a string, or a list or mapping of those; "
                     f"got {value!r} ({type(value).__name__}); quote it")


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type (0.1 and '0.1', or 1 and True, are different values of a study)."""
    return type(a) is type(b) and a == b


def _values(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in map(_json_value, values, itertools.repeat("each value")):
        if any(_same(v, s) for s in seen):
            raise ValueError(f"values must differ; got {v!r} twice; list each value once")
        seen.append(v)
    return seen


def _json_values(values: list[Any]) -> list[Any]:
    return list(map(_json_value, values, itertools.repeat("each value")))


Key = Annotated[str, AfterValidator(_dotted_key)]
Values = Annotated[list[Any], Field(min_length=1), AfterValidator(_values)]
#: a zip key's values may repeat (another key tells those positions apart); the positions must differ
ZipValues = Annotated[list[Any], Field(min_length=1), AfterValidator(_json_values)]


def _duration(value: Any) -> Any:
    """A planned cell time (``2h30m``, ``90m``, ``5400``) as seconds; ValueError (one line) otherwise."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return value  # None passes; the rest fails the float check with pydantic's own message
    try:
        return parse_duration(str(value), "cell_time")
    except UserError as err:
        raise ValueError(str(err).removeprefix("cell_time: ")) from None


class Variant(Strict):
    """One named set of edits: keys removed (``unset``), then keys set (``set``; null removes); ``base``, a
    scenario file of its own (relative to the study file, then the cwd), replaces the study's base for it.
    ``cell_time``: a planning guess of one cell's wall time (``2h30m``), used by ``--budget`` and the time left
    until a cell of the variant has been timed (``p2pfl.study.times``); it changes no cell."""

    base: Optional[Annotated[str, Field(min_length=1)]] = None
    unset: list[Key] = Field(default_factory=list)
    set: dict[Key, Any] = Field(default_factory=dict)
    cell_time: Annotated[Optional[float], BeforeValidator(_duration)] = None


class SeedRange(Strict):
    """``{start: 0, stop: 3}``: the seeds 0, 1, 2."""

    start: int = Field(0, ge=0)
    stop: int

    @model_validator(mode="after")
    def _order(self) -> SeedRange:
        if self.stop <= self.start:
            raise ValueError(f"'stop' must be greater than 'start'; got start {self.start}, stop {self.stop}; "
                             "stop is the first seed not run")
        return self


class VerifySpec(Strict):
    """How closely a re-run of an archived cell must reproduce its summary.json (``p2pfl.study.verify``): a number
    matches when ``|new - old| <= atol + rtol * |old|``; everything else must be equal. It changes no cell."""

    rtol: float = Field(0.0, ge=0, description="relative tolerance of a summary number")
    atol: float = Field(0.0, ge=0, description="absolute tolerance of a summary number")


class StudySpec(Strict):
    """A study file as written (validated; not yet expanded)."""

    name: Optional[Annotated[str, AfterValidator(_name)]] = None
    description: str = ""
    base: Union[Annotated[str, Field(min_length=1)], dict[str, Any]]
    unset: list[Key] = Field(default_factory=list)
    set: dict[Key, Any] = Field(default_factory=dict)
    variants: dict[Annotated[str, AfterValidator(_name)], Variant] = Field(default_factory=dict)
    grid: dict[Key, Values] = Field(default_factory=dict)
    zip: dict[Key, ZipValues] = Field(default_factory=dict)
    seeds: Union[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)], SeedRange]
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    order: Literal["variants", "seeds"] = Field(
        "variants", description="the order cells run in: variants (each cell's seeds together), or seeds (every "
                                "cell of the first seed, then of the next: a long study reads whole tables early)")
    verify: Optional[VerifySpec] = Field(
        None, description="tolerance of `p2pfl archive verify` (default: byte for byte); changes no cell")

    @field_validator("zip")
    @classmethod
    def _paired(cls, value: dict[str, list[Any]], info: ValidationInfo) -> dict[str, list[Any]]:
        both = [k for k in value if k in (info.data.get("grid") or {})]
        if both:
            raise ValueError(f"key '{both[0]}' is also in 'grid'; got it in both; keep it in one of them")
        lengths = {k: len(v) for k, v in value.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k}: {n}" for k, n in lengths.items())
            raise ValueError(f"'zip' pairs the i-th values of its keys, so its lists need the same length; got "
                             f"lengths {shown}; make them equal or move a key to 'grid'")
        positions: list[list[Any]] = []
        for i, position in enumerate(zip(*value.values())):
            tagged = [(type(v).__name__, v) for v in position]
            if tagged in positions:
                raise ValueError(f"positions must differ; position {i} repeats position {positions.index(tagged)} "
                                 f"({dict(zip(value, position))}); list each combination once")
            positions.append(tagged)
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: Any) -> Any:
        if isinstance(value, list) and len(set(value)) != len(value):
            raise ValueError(f"seeds must differ; got {value}; list each seed once")
        return value

    def seed_list(self) -> list[int]:
        s = self.seeds
        return list(range(s.start, s.stop)) if isinstance(s, SeedRange) else list(s)

    @field_validator("exclude")
    @classmethod
    def _exclusions(cls, value: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        d = info.data
        axes: dict[str, list[Any]] = {"variant": list(d.get("variants") or {}), **(d.get("grid") or {}),
                                      **(d.get("zip") or {})}
        normalized = []
        for i, entry in enumerate(value):
            where = f"entry {i}"
            if not entry:
                raise ValueError(f"{where} is empty; give the variant and/or grid or zip values of the cells to drop")
            out = {}
            for key, given in entry.items():
                if key not in axes:
                    known = ", ".join(axes) or "none"
                    raise ValueError(f"{where}: key {key!r} is not 'variant' or a grid or zip key (known: {known}); "
                                     "exclude names cells by what the study varies")
                out[key] = v = given if key == "variant" else _json_value(given)
                if not any(_same(v, x) for x in axes[key]):
                    raise ValueError(f"{where}: {key} {given!r} is not one of the study's values {axes[key]}; "
                                     "use one of them")
            normalized.append(out)
        return normalized  # values as the grid and zip hold them, so matching a cell is plain comparison

    def excluded(self, variant: Optional[str], assignment: Mapping[str, Any]) -> bool:
        """Whether an ``exclude`` entry matches this cell."""
        return any(_matches(entry, variant, assignment) for entry in self.exclude)

    def n_cells(self) -> int:
        """Cells before exclusions (checked against MAX_CELLS before anything is expanded)."""
        n_zip = len(next(iter(self.zip.values()))) if self.zip else 1
        return (max(1, len(self.variants)) * math.prod(len(v) for v in self.grid.values()) * n_zip
                * len(self.seed_list()))


def _matches(entry: Mapping[str, Any], variant: Optional[str], assignment: Mapping[str, Any]) -> bool:
    """Whether a cell has every value of an ``exclude`` entry."""
    values = {"variant": variant, **assignment}
    return all(_same(values[k], w) for k, w in entry.items())


@dataclass(frozen=True)
class Cell:
    """One run of a study: its id, what it varies, the edits applied to the base, and the validated scenario."""

    id: str
    variant: Optional[str]
    grid: Mapping[str, Any]
    seed: int
    unset: tuple[str, ...]  # every key removed from the base (the study's, then the variant's)
    overrides: tuple[str, ...]  # every KEY=VALUE set, in order
    flags: tuple[str, ...]  # this cell's own edits as command-line flags (the study-wide ones left out)
    scenario: Scenario = field(repr=False)

    def record(self, study: str) -> dict[str, Any]:
        """The content of the cell's ``cell.json``."""
        return {"study": study, "cell": self.id, "variant": self.variant, "grid": dict(self.grid), "seed": self.seed}


@dataclass(frozen=True)
class Study:
    """A loaded study: its spec, where it came from, and every cell (validated)."""

    name: str
    source: str
    spec: StudySpec
    base: str  # the base scenario file, or "(inline)"
    cells: tuple[Cell, ...]

    def planned_times(self) -> dict[Optional[str], float]:
        """Variant -> its planned cell time in seconds (``cell_time``), for the variants that give one."""
        return {name: v.cell_time for name, v in self.spec.variants.items() if v.cell_time is not None}

    def common_edits(self) -> list[str]:
        """The study-wide ``--unset`` / ``--set`` flags."""
        return ([f"--unset {k}" for k in self.spec.unset]
                + [f"--set {override_text(k, v)}" for k, v in self.spec.set.items()])


def override_text(key: str, value: Any) -> str:
    """``KEY=VALUE`` as ``--set`` takes it (the value written as one line of YAML)."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, sort_keys=False,
                          width=2**31 - 1)
    text = text.removesuffix("...\n").strip()
    return f"{key}={text}"


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]


def _id_value(value: Any) -> str:
    """A value as it appears in a cell id: plain numbers and words as written, anything else slug + hash."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return value
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    slug = re.sub(r"[^A-Za-z0-9_.+]+", "-", text).strip("-.")[:24].rstrip("-.")
    return f"{slug}-{_digest(value)}" if slug else _digest(value)


def cell_id(variant: Optional[str], assignment: Mapping[str, Any], seed: int) -> str:
    """``variant__key=value__...__seedN`` (no variant part when ``variant`` is None)."""
    parts = [] if variant is None else [variant]
    parts += [f"{k}={_id_value(v)}" for k, v in assignment.items()]
    parts.append(f"seed{seed}")
    text = "__".join(parts)
    if len(text) > MAX_ID:
        text = f"{text[: MAX_ID - 9]}-{_digest(text)}"
    return text


def expand(spec: StudySpec) -> list[tuple[Optional[str], dict[str, Any], int]]:
    """(variant, grid and zip values, seed) of every cell, in the study's order."""
    variants: list[Optional[str]] = list(spec.variants) or [None]
    grid = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())]
    zipped = [dict(zip(spec.zip, values)) for values in zip(*spec.zip.values())] if spec.zip else [{}]
    kept = [(v, {**g, **z}) for v in variants for g in grid for z in zipped if not spec.excluded(v, {**g, **z})]
    if spec.order == "seeds":
        return [(v, a, s) for s in spec.seed_list() for v, a in kept]
    return [(v, a, s) for v, a in kept for s in spec.seed_list()]


def _base_file(ref: str, base_dir: Path, source: str) -> Path:
    p = Path(ref).expanduser()
    candidates = [p] if p.is_absolute() else [base_dir / p, Path.cwd() / p]
    for c in candidates:
        if c.is_file():
            return c
    looked = " and ".join(dict.fromkeys(str(c.parent) for c in candidates))
    raise ConfigError(f"{source}: field 'base': scenario file {ref!r} not found (looked in {looked}); "
                      "check the path (relative to the study file, then to the working directory)")


def load_study_dict(data: Mapping[str, Any], *, source: str = "study", base_dir: Optional[Path] = None,
                    default_name: str = "study") -> Study:
    """Validate a study given as a mapping, expand it and validate every cell (the Python API's entry point)."""
    from p2pfl.config.loader import load, load_dict

    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of study fields; got {type(data).__name__}; "
                          f"a study needs {STUDY_NEEDS}")
    spec = parse_model(StudySpec, dict(data), source)
    name = spec.name or default_name
    if spec.name is None and not (_NAME.fullmatch(name) and len(name) <= 64):
        raise ConfigError(f"{source}: field 'name' is required here: the file's name {name!r} cannot name the "
                          "output folder; add e.g. name: my_study")
    base_dir = Path.cwd() if base_dir is None else Path(base_dir)
    n = spec.n_cells()
    if n > MAX_CELLS:
        raise ConfigError(f"{source}: the study expands to {n:,} cells, more than {MAX_CELLS:,}; "
                          "use fewer variants, grid values or seeds (or split it into several studies)")
    base_path = _base_file(spec.base, base_dir, source) if isinstance(spec.base, str) else None
    own_base = {name: _base_file(v.base, base_dir, f"{source}: variants.{name}") for name, v in spec.variants.items()
                if v.base is not None}
    expanded = expand(spec)
    if not expanded:
        raise ConfigError(f"{source}: field 'exclude' drops every cell; drop fewer")
    everything = expand(spec.model_copy(update={"exclude": []}))
    for i, entry in enumerate(spec.exclude):
        if not any(_matches(entry, v, a) for v, a, _ in everything):
            raise ConfigError(f"{source}: field 'exclude': entry {i} ({entry}) matches no cell (its zip values come from "
                              "different positions); name values that one cell has")
    common = [override_text(k, v) for k, v in spec.set.items()]
    cells: list[Cell] = []
    ids: dict[str, str] = {}
    for variant, assignment, seed in expanded:
        cid = cell_id(variant, assignment, seed)
        v = spec.variants[variant] if variant is not None else Variant()
        unset = (*spec.unset, *v.unset)
        own = [override_text(k, x) for k, x in (*v.set.items(), *assignment.items())]
        overrides = (*common, *own)
        where = f"{source}: cell '{cid}'"
        path = own_base.get(variant or "", base_path)
        try:
            if path is not None:
                sc = load(path, overrides=overrides, unset=unset, seed=seed)
            else:
                assert isinstance(spec.base, dict)
                sc = load_dict(spec.base, source=where, base_dir=base_dir, overrides=overrides, unset=unset, seed=seed)
        except UserError as err:
            text = " ".join(str(err).split())
            if "--unset protocol." in text:
                text += " (in a study: list the keys in the variant's or the study's 'unset')"
            raise ConfigError(text if text.startswith(where) else f"{where}: {text}") from None
        folded = cid.lower()
        if folded in ids:
            raise ConfigError(f"{source}: two cells get the same id; got '{ids[folded]}' and '{cid}' (values that differ "
                              "only by case or type, such as 0.1 and '0.1'); make the values (or variant names) differ")
        ids[folded] = cid
        flags = (*((f"(base {os.path.normpath(own_base[variant])})",) if variant in own_base else ()),
                 *(f"--unset {k}" for k in v.unset), *(f"--set {o}" for o in own), f"--seed {seed}")
        cells.append(Cell(cid, variant, assignment, seed, unset, overrides, flags, sc))
    return Study(name=name, source=source, spec=spec, base=os.path.normpath(base_path) if base_path else "(inline)",
                 cells=tuple(cells))


def load_study(source: str | Path | Mapping[str, Any]) -> Study:
    """Read and validate a study YAML file (or a mapping): every cell is validated."""
    if isinstance(source, Mapping):
        return load_study_dict(source)
    path = Path(source)
    data = require_mapping(read_yaml(path), path, "study", STUDY_NEEDS)
    return load_study_dict(data, source=str(path), base_dir=path.parent, default_name=path.stem)
