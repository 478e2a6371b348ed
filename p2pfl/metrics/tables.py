"""Writing a report from run directories: markdown tables, and the command line every report script shares.

    markdown_table(rows, header)    the lines of a markdown table (rows: a DataFrame or lists of cells)
    fmt_num(x, spec)                a number for a cell ("—" when missing); fmt_bytes, fmt_s: bytes in kB/MB/GB,
                                    seconds
    report_main(write, doc, md)     ``python analysis/<report>.py DIR [DIR ...] [--md FILE]``

The reports in ``analysis/`` read runs with ``p2pfl.metrics.runs`` (``load_runs`` and its long forms),
group them with pandas, and write their markdown with ``markdown_table``; each one's ``main`` is
``report_main``: the run directories (a study's ``--out`` folder or its archive under ``analysis/cells``),
the markdown file to write (figures go beside it), and the report's own switches.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from p2pfl.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["markdown_table", "fmt_num", "fmt_bytes", "fmt_s", "report_main"]

_RULE = {"l": "---", "r": "---:", "c": ":---:"}


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _cell(value: Any, na: str) -> str:
    return na if _missing(value) else str(value)


def markdown_table(rows: pd.DataFrame | Iterable[Sequence[Any]], header: Optional[Sequence[str]] = None, *,
                   align: str = "", na: str = "—") -> list[str]:
    """The lines of a markdown table: the header, the rule, then one line per row.

    ``rows`` is a DataFrame (``header`` defaults to its columns) or an iterable of rows, each a
    sequence of cells. A cell is written with ``str`` (format numbers before), a missing one (None,
    NaN) as ``na``. ``align`` gives one letter per column, ``l``, ``r`` or ``c``; columns past its end
    are left-aligned.

    >>> markdown_table([["a", 1], ["b", None]], ["name", "n"], align="lr")
    ['| name | n |', '|---|---:|', '| a | 1 |', '| b | — |']
    """
    if header is None:
        if not hasattr(rows, "columns"):
            raise ValueError("markdown_table needs a header for rows that are not a DataFrame; got header=None")
        header = [str(c) for c in rows.columns]
    if any(a not in _RULE for a in align):
        raise ValueError(f"align must be made of the letters l, r and c; got {align!r}")
    if hasattr(rows, "itertuples"):
        rows = rows.itertuples(index=False, name=None)
    lines = ["| " + " | ".join(header) + " |", "|" + "".join(_RULE[a] + "|" for a in align.ljust(len(header), "l"))]
    for row in rows:
        cells = [_cell(v, na) for v in row]
        if len(cells) != len(header):
            raise ValueError(f"a row has {len(cells)} cells for a header of {len(header)}: {cells}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def fmt_num(x: Optional[float], spec: str, na: str = "—") -> str:
    """``x`` formatted by ``spec``; ``na`` when it is missing (None or NaN: an arm that has not run yet)."""
    return na if _missing(x) else format(x, spec)


def fmt_bytes(b: Optional[float]) -> str:
    """Bytes with two decimals in the largest of GB, MB and kB they reach (10^3 steps), else whole bytes; "—" missing."""
    if b is None or math.isnan(b):
        return "—"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.2f} {unit}"
    return f"{b:.0f} B"


def fmt_s(t: Optional[float]) -> str:
    """Seconds: two decimals under 100 s, else whole seconds with thousands separators; "—" missing."""
    return "—" if t is None or math.isnan(t) else (f"{t:.2f} s" if t < 100 else f"{t:,.0f} s")


def report_main(write: Callable[..., Any], doc: Optional[str], md: str | Path,
                argv: Optional[Sequence[str]] = None, *, flags: Mapping[str, str] = {}) -> int:
    """The command line of a report script: ``DIR [DIR ...] [--md FILE] [--<flag> ...]``.

    Calls ``write(dirs, md, **switches)``: ``dirs`` the run directories or folders of them (Paths),
    ``md`` the markdown to write (default ``md``), one boolean keyword per entry of ``flags`` (name ->
    help; ``--no-statistics`` arrives as ``no_statistics``). The description is the first paragraph of
    ``doc``. The report's folder is made when missing. A ``UserError`` (no runs there, an unreadable file)
    ends it with its one line and status 2, and a folder made for it is removed (nothing half-written).
    """
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path,
                    help="run directories or folders of them: a study's --out folder, or its archive")
    ap.add_argument("--md", type=Path, default=Path(md), help=f"the report to write, figures beside it (default {md})")
    for name, text in flags.items():
        ap.add_argument(f"--{name}", action="store_true", help=text)
    args = ap.parse_args(argv)
    made = next((d for d in reversed([args.md.parent, *args.md.parent.parents]) if not d.exists()), None)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(args.dirs, args.md, **{n.replace("-", "_"): getattr(args, n.replace("-", "_")) for n in flags})
    except UserError as err:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
