"""The scenario and study file reference, generated from the pydantic models that validate them.

``docs/hooks.py`` calls :func:`scenario_page` and :func:`study_page` when the site is built, so the
reference is never older than the code. ``python docs/gen_reference.py [scenario|study]`` prints a page.
The output depends only on the models (p2pfl's own plug-ins included, other installed ones left out).
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["scenario_page", "study_page"]

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "multiple of"))


def _is_model(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _strip(t: object) -> object:
    """``Annotated[X, ...]`` -> X (repeatedly)."""
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    return t


def _models_in(t: object) -> list[type[BaseModel]]:
    """Every model class a field's annotation may hold (through unions, lists, dict values, Annotated)."""
    t = _strip(t)
    if _is_model(t):
        return [t]  # type: ignore[list-item]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(t):
        for m in _models_in(arg):
            if m not in out:
                out.append(m)
    return out


def _tag(model: type[BaseModel]) -> str | None:
    """``kind: iid`` for a variant of a tagged union (its first single-value Literal field), else None."""
    for name, info in model.model_fields.items():
        t = _strip(info.annotation)
        if typing.get_origin(t) is typing.Literal and len(typing.get_args(t)) == 1:
            return f"{name}: {typing.get_args(t)[0]}"
    return None


def _type(t: object) -> str:
    """A field's type as a YAML user reads it."""
    t = _strip(t)
    if _is_model(t):
        tag = _tag(t)  # type: ignore[arg-type]
        return f"{{{tag}, ...}}" if tag else "mapping"
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts: list[str] = []
        for a in args:
            text = "null" if a is type(None) else _type(a)
            if text not in parts:
                parts.append(text)
        return " | ".join(parts)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}" if args else "mapping"
    if t is typing.Any:
        return "any"
    names = {str: "string", int: "integer", float: "number", bool: "true | false", type(None): "null"}
    if t in names:
        return names[t]
    return str(getattr(t, "__name__", t)).replace("typing.", "")


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, str):
        return value or '""'
    return str(yaml.safe_dump(value, default_flow_style=True, width=1 << 16)).removesuffix("\n...\n").strip()


def _bounds(info: FieldInfo) -> str:
    metadata = list(info.metadata)
    for arg in typing.get_args(info.annotation):  # a number or a distribution: the number's own bounds
        if typing.get_origin(arg) is typing.Annotated:
            for m in typing.get_args(arg)[1:]:
                metadata.extend(getattr(m, "metadata", [m]))
    seen: list[str] = []
    for m in metadata:
        for attr, sign in _BOUNDS:
            if getattr(m, attr, None) is not None:
                text = f"{sign} {getattr(m, attr)}"
                if text not in seen:
                    seen.append(text)
    return ", ".join(seen)


def _rst(text: str) -> str:
    """Docstring markup to markdown: ``code`` -> `code`."""
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return " ".join(_rst(text).replace("|", "\\|").split())


def _doc(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    return _rst(" ".join(doc.split("\n\n")[0].split())) if doc else ""


class _Writer:
    """Renders models as tables, each nested model once, under the first path that reaches it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.where: dict[type[BaseModel], str] = {}

    def table(self, model: type[BaseModel], path: str, skip: tuple[str, ...] = ()) -> list[tuple[str, object]]:
        rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
        nested: list[tuple[str, object]] = []
        first: dict[type[BaseModel], str] = {}  # models of this table: the first field that shows them
        for name, info in model.model_fields.items():
            if name in skip:
                continue
            about = info.description or ""
            models = _models_in(info.annotation)
            default = f"`{_cell(_default(info))}`"
            if models:
                here = f"{path + '.' if path else ''}{name}"
                seen = [self.where.get(m, first.get(m)) for m in models]
                if all(seen):
                    about = " ".join(x for x in (about, f"(as `{seen[0]}`)") if x)
                else:
                    ref = here + _reach(info.annotation, models[0])
                    about = " ".join(x for x in (about, f"(`{ref}` below)") if x)
                    nested.append((name, info.annotation))
                    for m in models:
                        first.setdefault(m, here + _reach(info.annotation, m))
                if isinstance(info.default, BaseModel):
                    default = "(below)"
            rows.append(f"| `{name}` | {_cell(_type(info.annotation))} | {default} "
                        f"| {_cell(_bounds(info))} | {_cell(about)} |")
        if len(rows) == 2:
            rows.append("| — | | | | no fields of its own |")
        self.lines += [*rows, ""]
        return nested

    def section(self, model: type[BaseModel], path: str, level: int, skip: tuple[str, ...] = (),
                title: str | None = None) -> None:
        self.where.setdefault(model, path)
        self.lines += [f"{'#' * level} {title or f'`{path}`'}", ""]
        if _doc(model):
            self.lines += [_doc(model), ""]
        for name, annotation in self.table(model, path, skip):
            self.nested(f"{path}.{name}", annotation, level + 1)

    def nested(self, path: str, annotation: object, level: int) -> None:
        models = [m for m in _models_in(annotation) if m not in self.where]
        tagged = [m for m in models if _tag(m)]
        for m in models:
            where = path + _reach(annotation, m)
            tag = (_tag(m) or "other kinds") if tagged and len(models) > 1 else None
            self.section(m, where, level, title=f"`{where}` ({tag})" if tag else None)


def _reach(annotation: object, model: type[BaseModel]) -> str:
    """How a path reaches ``model`` inside a field: ``""`` (the value), ``[]`` (a list item), ``.<name>`` (a
    mapping's value), combined as nested (``[].<name>``)."""
    t = _strip(annotation)
    if t is model:
        return ""
    origin, args = typing.get_origin(t), typing.get_args(t)
    inner = [a for a in (args[1:] if origin is dict else args) if model in _models_in(a)]
    if not inner:
        return ""
    rest = _reach(inner[0], model)
    if origin in (list, tuple, set, frozenset):
        return "[]" + rest
    if origin is dict:
        return ".<name>" + rest
    return rest


def _own_plugins(group: str) -> dict[str, str]:
    from p2pfl.plugins import BUILTIN

    return dict(BUILTIN.get(group, {}))


def scenario_page() -> str:
    """The scenario reference: every top-level section, its fields and every nested mapping."""
    from p2pfl.config.scenario import Scenario
    from p2pfl.data import DATASETS
    from p2pfl.data.datasets import DATASET_INFO
    from p2pfl.data.schema import PluginPartition
    from p2pfl.plugins import import_object
    from p2pfl.protocols.base import ProtocolParams
    from p2pfl.registry import BUILTIN, get_protocol

    w = _Writer()
    w.lines += [
        "# Scenario reference",
        "",
        "Generated from the pydantic models that validate a scenario (`p2pfl.config.scenario.Scenario` and the "
        "models it holds) when this site is built; `python docs/gen_reference.py scenario` prints it. "
        "Unknown keys are errors. A type `{kind: x, ...}` is one variant of a tagged union: its fields "
        "are in the section titled with that tag. See [Scenarios](../scenarios.md) for how files are "
        "written, extended and overridden.",
        "",
        "## Top level",
        "",
    ]
    sections = w.table(Scenario, "")
    by_name = dict(sections)
    for name, annotation in sections:
        if name == "protocol":
            continue
        if name == "data":
            _data_section(w, annotation, DATASETS, DATASET_INFO, PluginPartition, import_object)
            continue
        w.nested(name, annotation, 2)
    assert "protocol" in by_name
    w.where.setdefault(ProtocolParams, "protocol")
    w.lines += ["## `protocol`", "", _doc(ProtocolParams) + " Every protocol takes these:", ""]
    w.table(ProtocolParams, "protocol")
    base = set(ProtocolParams.model_fields)
    for name in sorted(BUILTIN):
        cls = get_protocol(name, "docs")
        server = ("with or without a server (see its parameters)" if cls.needs_server and cls.serverless_option
                  else "needs a server" if cls.needs_server else "serverless")
        dyn = "runs under `dynamics`" if cls.supports_dynamics else "no `dynamics`"
        w.lines += [f"### `protocol: {{name: {name}}}`", "", f"{cls.summary} ({server}; {dyn}).", ""]
        for field, annotation in w.table(cls.Params, f"protocol ({name})", skip=tuple(base)):
            w.nested(f"protocol.{field}", annotation, 4)
    return "\n".join(w.lines).rstrip() + "\n"


def _data_section(w: _Writer, annotation: object, datasets: Any, info: Any, plugin_base: type,
                  import_object: Any) -> None:
    own = {*info.builtin, *_own_plugins("p2pfl.datasets")}  # p2pfl's own: other installed plug-ins left out
    (model,) = _models_in(annotation)
    w.where.setdefault(model, "data")
    w.lines += ["## `data`", ""]
    if _doc(model):
        w.lines += [_doc(model), ""]
    nested = w.table(model, "data")
    w.lines += ["Datasets (`data.dataset`; `p2pfl list datasets` says which are available here):", "",
                "| dataset | what |", "|---|---|"]
    w.lines += [f"| `{k}` | {_cell(datasets[k])} |" for k in datasets if k in own]  # registry order
    w.lines += [""]
    for name, ann in nested:
        w.nested(f"data.{name}", ann, 3)
        if name == "partition":
            for kind, target in sorted(_own_plugins("p2pfl.partitions").items()):
                cls = import_object(target)
                assert isinstance(cls, type) and issubclass(cls, plugin_base) and issubclass(cls, BaseModel)
                w.section(cls, "data.partition", 3, title=f"`data.partition` (kind: {kind}; a plug-in's)")


def study_page() -> str:
    """The study file reference (``p2pfl sweep``)."""
    from p2pfl.study.spec import StudySpec

    w = _Writer()
    w.lines += [
        "# Study file reference",
        "",
        "Generated from `p2pfl.study.spec.StudySpec` when this site is built; "
        "`python docs/gen_reference.py study` prints it. See [Studies](../studies.md) for what a sweep "
        "does with a study.",
        "",
    ]
    w.section(StudySpec, "study", 2, title="Top level")
    return "\n".join(w.lines).rstrip() + "\n"


def _pages() -> Iterator[tuple[str, str]]:
    yield "scenario", scenario_page()
    yield "study", study_page()


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "scenario"
    pages = {"scenario": scenario_page, "study": study_page}
    if which not in pages:
        sys.exit(f"usage: python docs/gen_reference.py [{'|'.join(pages)}]")
    sys.stdout.write(pages[which]())
