"""Architecture checks: the package's import graph and what validating a scenario imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "p2pfl"


def _top(module: str) -> str | None:
    """``p2pfl.sim.kernel`` -> ``sim``; a module directly under p2pfl (errors, seeding, ...) is its own node."""
    parts = module.split(".")
    if parts[0] != "p2pfl" or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _static_imports(path: Path) -> set[str]:
    """Modules imported at import time: top-level statements, not under ``if TYPE_CHECKING`` nor in functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    out.add(".".join([*base, node.module] if node.module else base))
                elif node.module:
                    out.add(node.module)
                    out.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return out


def package_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for path in PKG.rglob("*.py"):
        src = _top(_module_name(path))
        if src is None:
            continue
        g.add_node(src)
        for mod in _static_imports(path):
            dst = _top(mod)
            if dst is not None and dst != src:
                g.add_edge(src, dst)
    return g


def test_no_import_cycles_between_top_level_packages() -> None:
    g = package_graph()
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], f"import cycles between p2pfl's top-level packages: {cycles}"


def test_the_checker_sees_a_cycle() -> None:
    """The graph builder must see real edges (a checker that finds no edge finds no cycle)."""
    g = package_graph()
    assert g.has_edge("sim", "data") and g.has_edge("protocols", "learning") and g.has_edge("config", "topology")
    assert not g.has_edge("sim", "protocols")


def _modules_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_config_imports_nothing_heavy() -> None:
    mods = _modules_after("import p2pfl.config")
    heavy = [m for m in mods if m.split(".")[0] in ("torch", "mujoco", "triton", "sklearn")
             or m.startswith(("p2pfl.protocols.", "p2pfl.robotics", "p2pfl.sim"))]
    assert heavy == []


@pytest.mark.slow
def test_validating_a_scenario_imports_only_its_protocol() -> None:
    mods = _modules_after("from p2pfl.config import load\nload('scenarios/quickstart.yaml')")
    assert not [m for m in mods if m.split(".")[0] in ("mujoco", "triton", "sklearn")]
    assert not [m for m in mods if m.startswith(("p2pfl.robotics", "p2pfl.clustering", "p2pfl.sim.kernel"))]
    protocol_modules = {m for m in mods if m.startswith(("p2pfl.protocols.server.", "p2pfl.protocols.serverless.",
                                                         "p2pfl.protocols.reference."))}
    assert protocol_modules <= {"p2pfl.protocols.serverless.gossip"}, protocol_modules
