"""Turn pydantic validation failures into one-line user errors.

Errors read like scikit-learn's: the file, the dotted field, the rule, and
the value received.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from p2pfl.errors import ConfigError

__all__ = ["Strict", "parse_model", "format_validation_error", "read_yaml"]

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _dotted(loc: tuple[Any, ...], prefix: str) -> str:
    # Drop pydantic's discriminator tags (e.g. 'ring' in a tagged union) from the path.
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(str(item))
    text = ".".join(parts).replace(".[", "[")
    return text or "(top level)"


def format_validation_error(err: ValidationError, source: str | Path, prefix: str = "") -> str:
    """One line: ``<file>: field '<a.b>': <reason>; got <value>`` (first error only)."""
    first = err.errors(include_url=False)[0]
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    # Tagged unions put the tag name in the location; hide it.
    ctx_tag = first.get("ctx", {}) or {}
    field = _dotted(tuple(x for x in loc if not _is_tag(x, ctx_tag)), prefix)
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


def _is_tag(item: Any, ctx: dict) -> bool:
    return isinstance(item, str) and item.startswith("function-") or False


def parse_model(model: type[M], data: Any, source: str | Path, prefix: str = "") -> M:
    """Validate ``data`` against ``model`` or raise a one-line ConfigError."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, prefix)) from None


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
