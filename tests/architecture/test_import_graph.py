"""No import circles between p2pfl's modules, counting every import the code can run.

``test_imports.py`` checks the graph of top-level packages built from import-time statements.
This graph is finer and wider: one node per module, and an edge for every import statement
anywhere in a file: at the top, inside a function or method (a lazy import, which only hides a
circle until the function runs), under ``if TYPE_CHECKING`` (a circle between the types still
ties the layers together) and ``importlib.import_module("p2pfl....")`` with a literal name.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.

Known circles are listed in ``KNOWN_CIRCLES`` by the one edge whose removal breaks them, with the
reason they are still here; a listed edge that no longer closes a circle fails the suite too, so
the list only shrinks.

On the same graph, the package stands in ``FLOORS``: no module imports from a floor above its own.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: (importer, imported) -> why the circle this edge closes is tolerated for now.
KNOWN_CIRCLES: dict[tuple[str, str], str] = {}


#: The package's floors, from the bottom: a module belongs to the floor of its longest listed prefix and
#: imports only from its own floor or below (within a floor, the circle test keeps the order).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("leaves", ("p2pfl.errors", "p2pfl.limits", "p2pfl.seeding", "p2pfl.plugins", "p2pfl.version",
                "p2pfl.validation")),
    ("ingredients", ("p2pfl.data", "p2pfl.learning", "p2pfl.topology", "p2pfl.metrics", "p2pfl.conditioning",
                     "p2pfl.robotics")),
    ("runtime: what a protocol is handed", ("p2pfl.executors", "p2pfl.sim", "p2pfl.clustering", "p2pfl.maths",
                                            "p2pfl.tensor")),
    ("protocols and their tensor programs", ("p2pfl.protocols", "p2pfl.registry")),
    ("scenario and engines", ("p2pfl.config", "p2pfl.sim.kernel", "p2pfl.tensor.simulation", "p2pfl.engines")),
    ("entry points", ("p2pfl.api", "p2pfl.study", "p2pfl.progress")),
    ("command line", ("p2pfl.cli", "p2pfl.__main__", "p2pfl")),
]


def floor_of(module: str) -> int:
    """The floor (index into ``FLOORS``) of ``module``: that of its longest listed prefix."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = i, len(p)
    if best < 0:
        raise KeyError(f"{module} is on no floor; add it (or its package) to FLOORS")
    return best


def imports_upward(g: nx.DiGraph) -> list[str]:
    """Every import statement of ``g`` whose module sits on a floor above the importer's."""
    return [f"{imp} ({FLOORS[floor_of(u)][0]} imports from {FLOORS[floor_of(v)][0]})"
            for u, v, d in g.edges(data=True) if floor_of(v) > floor_of(u) for imp in d["imports"]]


@dataclass(frozen=True)
class Import:
    """One import statement of ``source``: the p2pfl module it names, where, and how it runs."""

    source: str
    target: str
    path: Path
    line: int
    how: str  # "top" | "lazy" (in a function) | "type" (under TYPE_CHECKING)

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path.name}:{self.line}, {self.how})"


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of the package in ``package_dir``: dotted name -> file."""
    base = package_dir.parent
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` loads: itself, or its longest prefix that is a module; None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import in ``path`` of a module in ``modules``, whatever block it sits in."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []

    def add(name: str, node: ast.AST, how: str) -> None:
        target = _resolve(name, modules)
        if target is not None and target != module:
            out.append(Import(module, target, path, getattr(node, "lineno", 0), how))

    def visit(node: ast.AST, how: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and how == "top":
            how = "lazy"
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, "type")
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, how)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base, node, how)
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(node.args[0].value, node, "lazy" if how == "top" else how)
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    visit(tree, "top")
    return out


def import_graph(package_dir: Path) -> nx.DiGraph:
    """Modules of the package and their imports; each edge keeps its statements (``imports``)."""
    modules = module_names(package_dir)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for module, path in modules.items():
        for imp in imports_of(module, path, modules):
            if g.has_edge(imp.source, imp.target):
                g.edges[imp.source, imp.target]["imports"].append(imp)
            else:
                g.add_edge(imp.source, imp.target, imports=[imp])
    return g


def circles(g: nx.DiGraph) -> list[list[str]]:
    """One circle (first module repeated at the end) per strongly connected component of several modules."""
    out = []
    for component in sorted(nx.strongly_connected_components(g), key=sorted):
        if len(component) > 1:
            cycle = nx.find_cycle(g.subgraph(component))
            out.append([u for u, _ in cycle] + [cycle[-1][1]])
    return out


def _describe(g: nx.DiGraph, circle: list[str]) -> str:
    """The statements that close ``circle``, and every module caught in the same tangle."""
    tangle = sorted({circle[0]} | (nx.descendants(g, circle[0]) & nx.ancestors(g, circle[0])))
    edges = "\n    ".join(str(g.edges[u, v]["imports"][0]) for u, v in itertools.pairwise(circle))
    return f"{edges}\n    (modules in this tangle: {', '.join(tangle)})"


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph(ROOT / "p2pfl")


def test_no_import_circles_lazy_and_type_imports_included(graph: nx.DiGraph) -> None:
    g = graph.copy()
    g.remove_edges_from([e for e in KNOWN_CIRCLES if g.has_edge(*e)])
    found = circles(g)
    assert not found, "import circles in p2pfl (break them, e.g. move the shared names to a leaf module):\n  " + \
        "\n  ".join(_describe(g, c) for c in found)


def test_every_known_circle_still_exists(graph: nx.DiGraph) -> None:
    """A listed edge that closes no circle any more must leave ``KNOWN_CIRCLES`` (the list only shrinks)."""
    stale = [e for e in KNOWN_CIRCLES if not (graph.has_edge(*e) and nx.has_path(graph, e[1], e[0]))]
    assert not stale, f"these circles are gone; delete them from KNOWN_CIRCLES: {stale}"


def test_no_module_imports_from_a_floor_above_its_own(graph: nx.DiGraph) -> None:
    assert imports_upward(graph) == []


def test_the_floor_check_sees_an_upward_import(graph: nx.DiGraph) -> None:
    g = graph.copy()
    g.add_edge("p2pfl.sim.context", "p2pfl.protocols.base",
               imports=[Import("p2pfl.sim.context", "p2pfl.protocols.base", ROOT / "p2pfl/sim/context.py", 1, "lazy")])
    assert imports_upward(g) == ["p2pfl.sim.context -> p2pfl.protocols.base (context.py:1, lazy) "
                                 "(runtime: what a protocol is handed imports from protocols and their tensor programs)"]
    assert floor_of("p2pfl.sim.kernel") > floor_of("p2pfl.protocols.gossip") > floor_of("p2pfl.sim.context")
    assert floor_of("p2pfl.tensor.simulation") > floor_of("p2pfl.protocols.serverless.gossip_tensor") > \
        floor_of("p2pfl.tensor.program")
    with pytest.raises(KeyError, match="on no floor"):
        floor_of("elsewhere.module")


def test_the_data_package_builds_without_lazy_imports(graph: nx.DiGraph) -> None:
    """The former circle federation <-> partitions <-> synthetic: the build path imports one way, at the top."""
    data = [imp for u, v, d in graph.edges(data=True) if u.startswith("p2pfl.data") and v.startswith("p2pfl.data")
            for imp in d["imports"]]
    assert [str(i) for i in data if i.how != "top"] == []
    assert graph.has_edge("p2pfl.data.federation", "p2pfl.data.partitions")
    assert graph.has_edge("p2pfl.data.federation", "p2pfl.data.synthetic")
    assert not nx.has_path(graph, "p2pfl.data.partitions", "p2pfl.data.federation")
    assert not nx.has_path(graph, "p2pfl.data.synthetic", "p2pfl.data.federation")


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A circle closed by a lazy, a type-only, a relative or an import_module import is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.c import thing\n    return thing\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import d\nthing = 1\n",
        "sub/__init__.py": "",
        "sub/d.py": "from .. import e\n",
        "e.py": "import importlib\n\ndef g():\n    return importlib.import_module('pkg.a')\n",
        "leaf.py": "import os\nfrom pkg import a\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    g = import_graph(pkg)
    hows = {(u, v): d["imports"][0].how for u, v, d in g.edges(data=True)}
    assert hows == {("pkg.a", "pkg.b"): "top", ("pkg.b", "pkg.c"): "lazy", ("pkg.c", "pkg.sub.d"): "type",
                    ("pkg.sub.d", "pkg.e"): "top", ("pkg.e", "pkg.a"): "lazy", ("pkg.leaf", "pkg.a"): "top"}
    (found,) = circles(g)
    assert set(found) == {"pkg.a", "pkg.b", "pkg.c", "pkg.sub.d", "pkg.e"} and found[0] == found[-1]


def test_a_tensor_program_stands_beside_its_protocol_on_the_protocols_floor(graph: nx.DiGraph) -> None:
    """A program imports the tensor engine's runtime (the fleet, the trainer, the timing) as a protocol imports the
    kernel's context; the engine's driver reaches the programs only through ``Protocol.tensor_program``."""
    programs = sorted(m for m in graph if m.startswith("p2pfl.protocols.") and m.endswith("_tensor"))
    assert len(programs) >= 6
    for program in programs:
        assert floor_of(program) == floor_of("p2pfl.protocols.base"), program
        assert graph.has_edge(program, "p2pfl.tensor.program"), program
        assert not graph.has_edge("p2pfl.tensor.simulation", program)
    runtime = [m for m in graph if m.startswith("p2pfl.tensor.") and m != "p2pfl.tensor.simulation"]
    assert not [m for m in runtime for p in programs if nx.has_path(graph, m, p)]
