"""MkDocs hooks: pages made when the site is built, never committed twice.

- ``results/<name>`` for every file of ``analysis/results/`` (reports, their figures and tables), read
  from there: the results pages are the committed reports themselves. Every report is added to the
  nav's "Results" section after the pages written there by hand, so a new report is in the nav without
  an edit here.
- ``reference/scenario.md`` and ``reference/study.md``, generated from the pydantic models
  (``docs/gen_reference.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analysis" / "results"
#: Site paths of the generated reference pages -> the gen_reference function that writes each.
REFERENCE = {"reference/scenario.md": "scenario_page", "reference/study.md": "study_page"}
#: File kinds of analysis/results that become part of the site.
RESULT_SUFFIXES = (".md", ".png", ".csv", ".jsonl")
RESULTS_SECTION = "Results"


def result_files() -> dict[str, Path]:
    """Site path (``results/<name>``) -> the file in analysis/results, sorted by name."""
    return {f"results/{p.name}": p for p in sorted(RESULTS.iterdir())
            if p.is_file() and p.suffix in RESULT_SUFFIXES}


def generated_paths() -> set[str]:
    """Every site path these hooks add (the link test treats them as files of docs/)."""
    return {*result_files(), *REFERENCE}


def _gen_reference() -> Any:
    spec = importlib.util.spec_from_file_location("p2pfl_docs_gen_reference", Path(__file__).with_name(
        "gen_reference.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def on_config(config: Any) -> Any:
    """Append every report of analysis/results to the nav's Results section (by file name)."""
    nav = config["nav"]
    for entry in nav:
        if isinstance(entry, dict) and RESULTS_SECTION in entry:
            section = entry[RESULTS_SECTION]
            listed = {next(iter(e.values())) if isinstance(e, dict) else e for e in section}
            section.extend(path for path in result_files() if path.endswith(".md") and path not in listed)
            break
    else:
        raise ValueError(f"mkdocs.yml: the nav has no {RESULTS_SECTION!r} section for the reports")
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, source in result_files().items():
        files.append(File.generated(config, path, abs_src_path=str(source)))
    gen = _gen_reference()
    for path, function in REFERENCE.items():
        files.append(File.generated(config, path, content=getattr(gen, function)()))
    return files
