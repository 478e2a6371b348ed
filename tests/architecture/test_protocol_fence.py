"""The fence around protocol code, their tensor programs included (``<name>_tensor.py`` beside each protocol):
ground truth is for the engines' scoring and the oracle only, and waiting is the context's (``ctx.recv(kind,
until=)``, ``ctx.collect``), never arithmetic on the clock in a protocol."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ROOT / "p2pfl" / "protocols"
#: The one protocol that may read the true clusters, the reference that is given them: its generators and its
#: tensor program.
ORACLE = PROTOCOLS / "reference" / "oracle.py"
ORACLE_PROGRAM = PROTOCOLS / "reference" / "oracle_tensor.py"
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
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PROTOCOLS.rglob("*.py"))
                 if path not in (ORACLE, ORACLE_PROGRAM) for line in _truth_reads(path)]
    assert offenders == [], "protocols report clusters (ctx.report_clusters, Protocol.clusters); the kernel scores them"


def test_the_fence_sees_a_read_of_the_truth() -> None:
    """The checker must find real reads (one that finds none would pass anything), in a program too."""
    assert len(_truth_reads(ORACLE)) >= 3
    assert len(_truth_reads(ORACLE_PROGRAM)) >= 1


def test_the_fence_covers_every_tensor_program() -> None:
    """The programs the protocols name live inside the fenced folder, beside their protocols."""
    from tests.engine.programs import declared_programs

    targets = {t for names in declared_programs().values() for t in names}
    files = {ROOT / (t.partition(":")[0].replace(".", "/") + ".py") for t in targets}
    assert len(files) >= 6 and all(f.is_file() and f.is_relative_to(PROTOCOLS) for f in files)


def test_no_protocol_computes_the_time_left_to_a_deadline() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PROTOCOLS.rglob("*.py"))
                 for line in _time_left(path)]
    assert offenders == [], "wait with ctx.recv(kind, until=deadline) or ctx.collect(..., until=deadline)"


def test_the_clock_check_sees_a_subtraction(tmp_path: Path) -> None:
    sample = tmp_path / "p.py"
    sample.write_text("def f(ctx, deadline):\n    return max(deadline - ctx.now, 0.0)\n", encoding="utf-8")
    assert _time_left(sample) == [2]
