"""Turn pydantic validation failures into one-line user errors.

Errors read like scikit-learn's: the file, the dotted field, the rule, and
the value received.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from p2pfl.errors import ConfigError
from p2pfl.limits import MAX_YAML_BYTES, MAX_YAML_VALUES, fmt_bytes

__all__ = ["Strict", "parse_model", "format_validation_error", "read_yaml", "short_repr", "require_mapping", "check_expansion"]

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors, values are frozen.

    Numbers must be finite: ``.nan``, ``.inf`` and ``-.inf`` are refused in every float
    field (no field of the configuration means "unbounded" by infinity; leave such a
    field out or null instead).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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
        if (isinstance(item, int) and isinstance(node, (list, tuple)) and item < len(node)) or (isinstance(node, Mapping) and item in node):
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


#: The fix appended to pydantic's own messages, by error type (``ctx`` fills the braces).
_FIXES: dict[str, str] = {
    "greater_than": "use a value > {gt}",
    "greater_than_equal": "use a value >= {ge}",
    "less_than": "use a value < {lt}",
    "less_than_equal": "use a value <= {le}",
    "multiple_of": "use a multiple of {multiple_of}",
    "finite_number": "use a finite number (.nan and .inf are not allowed)",
    "int_type": "use a whole number",
    "int_parsing": "use a whole number",
    "int_from_float": "use a whole number",
    "int_parsing_size": "use a much smaller whole number",
    "float_type": "use a number",
    "float_parsing": "use a number",
    "bool_type": "use true or false",
    "bool_parsing": "use true or false",
    "string_type": "use a string",
    "dict_type": "use a mapping (key: value)",
    "model_type": "use a mapping (key: value)",
    "model_attributes_type": "use a mapping (key: value)",
    "list_type": "use a list ([a, b, ...])",
    "too_short": "give more items",
    "too_long": "give fewer items",
    "string_too_short": "give a longer string",
    "literal_error": "use one of those",
    "union_tag_invalid": "use one of those",
    "union_tag_not_found": "add it",
    "invalid_key": "write every key as a string",
}


def _fix(err: Mapping[str, Any]) -> str:
    template = _FIXES.get(err.get("type", ""))
    if template is None:
        return ""
    try:
        return "; " + template.format(**(err.get("ctx") or {}))
    except (KeyError, IndexError, ValueError):
        return ""


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
    msg = " ".join(str(first.get("msg", "invalid value")).split())
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(noise, "")
    if field == "(top level)" or (prefix and field == prefix and kind == "value_error"):
        where = f"'{prefix}'" if prefix else "the file"
        return f"{source}: {where}: {msg}{_fix(first)}"
    if "; got " in msg or msg.startswith("got "):  # the rule already shows the value (and ends with its fix)
        return f"{source}: field '{field}': {msg}"
    return f"{source}: field '{field}': {msg}; got {short_repr(first.get('input'))}{_fix(first)}"


def short_repr(value: Any) -> str:
    """``repr`` on one line, at most 80 characters (how an error shows the value it got)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def parse_model(model: type[M], data: Any, source: str | Path, prefix: str = "") -> M:
    """Validate ``data`` against ``model`` or raise a one-line ConfigError."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, prefix, data)) from None


def check_expansion(data: Any, path: str | Path) -> None:
    """Refuse data (loaded YAML) whose aliases make a loop or expand to more than ``MAX_YAML_VALUES`` values."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (Mapping, list, tuple)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(f"{path}: a YAML alias (*name) refers to a node that contains it; remove the loop")
        open_nodes.add(key)
        total = 1
        for child in (*node.keys(), *node.values()) if isinstance(node, Mapping) else node:
            total += size(child)
            if total > MAX_YAML_VALUES:
                raise ConfigError(f"{path}: the YAML expands to more than {MAX_YAML_VALUES:,} values "
                                  "(aliases repeat their anchor's content); write a smaller file")
        open_nodes.discard(key)
        sizes[key] = total
        return total

    try:
        size(data)
    except RecursionError:
        raise ConfigError(f"{path}: the YAML is nested too deeply; flatten it") from None


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` a file, turning every failure into a one-line ConfigError.

    A directory, a special file, a file too large, binary or not UTF-8 data and YAML
    that cannot be parsed or constructed are all refused with one line. An empty file
    (or one with only comments) gives None: the caller says what the file should hold.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a YAML file; give the path of a .yaml file")
    if not path.exists():
        raise ConfigError(f"{path}: file not found; check the path")
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file; give the path of a .yaml file")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise ConfigError(f"{path}: the file has {fmt_bytes(size)}, more than the {fmt_bytes(MAX_YAML_BYTES)} "
                              "a YAML file may have; check that it is the right file")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the file ({err.strerror or err}); check its permissions") from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{path}: binary data, not a YAML text file (NUL byte at offset {nul}); give a .yaml file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte 0x{raw[err.start]:02x} at offset {err.start}: "
                          "binary data?); give a YAML text file saved as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}; fix the syntax") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply; flatten it") from None
    except Exception as err:  # PyYAML's constructors raise ValueError etc. on bad scalars
        problem = " ".join(str(err).split()) or type(err).__name__
        raise ConfigError(f"{path}: invalid YAML value: {problem}; fix or quote the value") from None
    check_expansion(data, path)
    return data


def require_mapping(data: Any, source: str | Path, what: str, needs: str) -> dict[Any, Any]:
    """``data`` if it is a mapping; else a one-line ConfigError saying what a ``what`` file holds.

    ``None`` is an empty file (or a file with only comments); ``needs`` says what to write,
    e.g. ``"'kind' and its parameters, e.g. kind: ring and n: 16"``.
    """
    if data is None:
        raise ConfigError(f"{source}: the file is empty (no fields, at most comments); a {what} needs {needs}")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of {what} fields at the top level; got "
                          f"{type(data).__name__}; write 'key: value' lines: a {what} needs {needs}")
    return data
