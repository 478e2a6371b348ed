"""Turn pydantic validation failures into one-line user errors.

Errors read like scikit-learn's: the file, the dotted field, the rule, and
the value received.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from p2pfl.errors import ConfigError

__all__ = ["Strict", "parse_model", "format_validation_error", "read_yaml"]

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _field_path(loc: tuple[Any, ...], data: Any, kind: str) -> tuple[list[Any], int]:
    """The part of pydantic's ``loc`` that names keys of the user's data, and how deep it reached.

    Pydantic puts union branch labels (``constrained-float``, a tagged union's tag,
    ``function-after[...]``) into ``loc``; only keys present in the input (and list
    indices) are fields the user wrote. A missing or unknown key is kept as the last item.
    """
    path: list[Any] = []
    node = data
    for i, item in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(item, int) and isinstance(node, (list, tuple)) and item < len(node):
            path.append(item)
            node = node[item]
        elif isinstance(node, Mapping) and item in node:
            path.append(item)
            node = node[item]
        elif last and kind in ("missing", "extra_forbidden"):
            path.append(item)
    return path, len(path)


def _dotted(path: list[Any], prefix: str) -> str:
    parts = [prefix] if prefix else []
    parts += [f"[{item}]" if isinstance(item, int) else str(item) for item in path]
    text = ".".join(parts).replace(".[", "[")
    return text or "(top level)"


def format_validation_error(err: ValidationError, source: str | Path, prefix: str = "", data: Any = None) -> str:
    """One line: ``<file>: field '<a.b>': <reason>; got <value>``.

    Of several errors (e.g. one per branch of a union) the one reaching deepest
    into the user's data is reported: it is the most specific.
    """
    errors = err.errors(include_url=False)
    scored = [(_field_path(tuple(e.get("loc", ())), data, e.get("type", "")), i, e) for i, e in enumerate(errors)]
    # Deepest first; on a tie, prefer a broken rule over "wrong type" (another union branch's complaint).
    (path, _), _, first = max(scored, key=lambda t: (t[0][1], not t[2].get("type", "").endswith("_type"), -t[1]))
    kind = first.get("type", "")
    field = _dotted(path, prefix)
    if kind == "extra_forbidden":
        return f"{source}: unknown field '{field}'; remove it or check its spelling"
    if kind == "missing":
        return f"{source}: field '{field}' is required; add it"
    msg = first.get("msg", "invalid value")
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(noise, "")
    if field == "(top level)" or (prefix and field == prefix and kind == "value_error"):
        where = f"'{prefix}'" if prefix else "the file"
        return f"{source}: {where}: {msg}"
    got = first.get("input")
    got_text = repr(got)
    if len(got_text) > 80:
        got_text = got_text[:77] + "..."
    return f"{source}: field '{field}': {msg}; got {got_text}"


def parse_model(model: type[M], data: Any, source: str | Path, prefix: str = "") -> M:
    """Validate ``data`` against ``model`` or raise a one-line ConfigError."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, prefix, data)) from None


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` a file, turning every failure into a one-line ConfigError."""
    if not path.is_file():
        raise ConfigError(f"{path}: file not found; check the path")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}; fix the syntax") from None
