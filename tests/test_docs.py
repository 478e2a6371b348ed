"""The README is a short front door, and every relative link in it and in the documentation pages resolves.

The site itself is built by ``mkdocs build --strict`` in ``.ci/run``; these checks need no mkdocs.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
COMMANDS = [
    "```bash",
    "pip install -c constraints.txt -e . && p2pfl run scenarios/quickstart.yaml",
    "pip install -c constraints.txt -e '.[test]' && python -m pytest",
    "```",
]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def _hooks() -> Any:
    spec = importlib.util.spec_from_file_location("p2pfl_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _links(path: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    return LINK.findall(text)


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs writes it (Python-Markdown's toc slugify, after inline markup)."""
    text = re.sub(r"[`*]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M)}


def test_readme_is_short_and_opens_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    assert lines[0].startswith("# "), lines[0]
    assert lines[2:6] == COMMANDS, "README.md lines 3-6 must be the install-and-run and the test commands"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"


@pytest.mark.parametrize("path", [README, *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file(path: Path) -> None:
    generated = _hooks().generated_paths()
    bad = []
    for target in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same page (mkdocs --strict checks those)
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve()
        if resolved.exists():
            if anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                bad.append(f"{target} (no heading with anchor #{anchor})")
            continue
        inside = resolved.is_relative_to(DOCS) and resolved.relative_to(DOCS).as_posix() in generated
        if not inside:
            bad.append(target)
    assert not bad, f"{path.relative_to(ROOT)}: links to nothing: {bad}"


def test_every_page_is_in_the_nav() -> None:
    """A page outside the nav is unreachable from the site (mkdocs --strict refuses it too)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def paths(entries: Any) -> set[str]:
        if isinstance(entries, str):
            return {entries}
        if isinstance(entries, list):
            return set().union(*(paths(e) for e in entries))
        if isinstance(entries, dict):
            return set().union(*(paths(v) for v in entries.values()))
        return set()

    nav = paths(config["nav"])
    assert {p.relative_to(DOCS).as_posix() for p in _pages()} - nav == set()
    assert nav - {p.relative_to(DOCS).as_posix() for p in _pages()} <= _hooks().generated_paths()


def test_results_pages_come_from_analysis_results_not_copies() -> None:
    """The results pages are the committed reports, added at build time: none is duplicated under docs/."""
    reports = {p.name for p in (ROOT / "analysis" / "results").glob("*.md")}
    assert reports and {f"results/{n}" for n in reports} <= _hooks().generated_paths()
    assert not {p.name for p in (DOCS / "results").glob("*") if p.name != "index.md"}


@pytest.mark.slow
def test_the_generated_reference_covers_every_section_and_protocol() -> None:
    """docs/gen_reference.py: a section per top-level scenario field and per protocol; every study field."""
    from p2pfl.config.scenario import Scenario
    from p2pfl.registry import BUILTIN
    from p2pfl.study.spec import StudySpec

    spec = importlib.util.spec_from_file_location("p2pfl_docs_gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = gen.scenario_page()
    assert page == gen.scenario_page()  # deterministic
    for field in Scenario.model_fields:
        assert f"| `{field}` |" in page, field
    for section in ("topology", "data", "model", "training", "devices", "protocol", "executor", "dynamics"):
        assert f"\n## `{section}`\n" in page, section
    for name in BUILTIN:
        assert f"\n### `protocol: {{name: {name}}}`\n" in page, name
    for kind in ("iid", "label_shift", "feature_skew", "robot_suites"):
        assert f"(kind: {kind}" in page, kind
    study = gen.study_page()
    for field in StudySpec.model_fields:
        assert f"| `{field}` |" in study, field
