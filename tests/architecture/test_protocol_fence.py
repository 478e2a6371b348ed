"""The fence around protocol code: ground truth is for the kernel's scoring and the oracle only, and waiting
is the context's (``ctx.recv(kind, until=)``, ``ctx.collect``), never arithmetic on the clock in a protocol."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ROOT / "p2pfl" / "protocols"
#: The one protocol that may read the true clusters: the reference that is given them.
ORACLE = PROTOCOLS / "reference" / "oracle.py"
TRUTH = {"true_clusters", "true_cluster"}


def _truth_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read an attribute named like the ground truth (``run.true_clusters``,
    ``ctx.true_cluster``, ``getattr(x, "true_clusters")``)."""
    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in TRUTH
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in TRUTH)

    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if reads(node)]


def _time_left(path: Path) -> list[int]:
    """Lines of ``path`` that subtract the clock from something (``deadline - ctx.now``): time left to a deadline."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and isinstance(node.right, ast.Attribute) and node.right.attr == "now"]


def test_only_the_oracle_reads_the_true_clusters() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PROTOCOLS.rglob("*.py")) if path != ORACLE
                 for line in _truth_reads(path)]
    assert offenders == [], "protocols report clusters (ctx.report_clusters, Protocol.clusters); the kernel scores them"


def test_the_fence_sees_a_read_of_the_truth() -> None:
    """The checker must find real reads (one that finds none would pass anything)."""
    assert len(_truth_reads(ORACLE)) >= 3


def test_no_protocol_computes_the_time_left_to_a_deadline() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PROTOCOLS.rglob("*.py"))
                 for line in _time_left(path)]
    assert offenders == [], "wait with ctx.recv(kind, until=deadline) or ctx.collect(..., until=deadline)"


def test_the_clock_check_sees_a_subtraction(tmp_path: Path) -> None:
    sample = tmp_path / "p.py"
    sample.write_text("def f(ctx, deadline):\n    return max(deadline - ctx.now, 0.0)\n", encoding="utf-8")
    assert _time_left(sample) == [2]
