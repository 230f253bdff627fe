"""The reference pages under docs/ say everything the code reads: every flag of every
command, every label and annotation key, every metric; every link in the README and the
docs leads somewhere; and the README stays a newcomer's page."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

import pytest

from scheduler.cli import build_parser
from scheduler.model import names
from scheduler.shell.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_flag_of_every_command_is_in_the_flags_page() -> None:
    page = (DOCS / "flags.md").read_text()
    missing = [
        f"{command} {option}"
        for command, parser in _commands().items()
        for action in parser._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
        and f"`{option}`" not in page.split(f"## `gang-scheduler {command}`")[-1].split("## ")[0]
    ]
    assert not missing, f"flags not in docs/flags.md under their command: {missing}"


def test_every_command_has_a_section_in_the_flags_page() -> None:
    page = (DOCS / "flags.md").read_text()
    assert [c for c in _commands() if f"## `gang-scheduler {c}`" not in page] == []


def _keys() -> dict[str, str]:
    """The label and annotation keys of ``names``: its string constants that are keys (a
    prefix, a list of choices and a condition type are not)."""
    return {
        name: value
        for name, value in vars(names).items()
        if name.isupper()
        and isinstance(value, str)
        and not name.endswith("_PREFIX")
        and not name.startswith(("UPSTREAM_", "WORKLOAD_"))  # condition types, a version
    }


def test_every_label_and_annotation_key_the_code_reads_or_writes_is_documented() -> None:
    page = (DOCS / "annotations.md").read_text()
    keys = _keys()
    assert len(keys) > 40, "the keys were found"
    missing = {name: key for name, key in keys.items() if f"`{key}`" not in page}
    assert not missing, f"keys not in docs/annotations.md: {missing}"


def test_every_metric_is_documented_with_its_type() -> None:
    page = (DOCS / "metrics.md").read_text()
    metrics = Metrics.create()
    missing = []
    for field in fields(metrics):
        if field.name == "registry":
            continue
        metric = getattr(metrics, field.name)
        name = metric._name + ("_total" if metric._type == "counter" else "")
        if f"| `{name}` | {metric._type} |" not in page:
            missing.append(name)
    assert not missing, f"metrics not in docs/metrics.md: {missing}"


PAGES = [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text())
    broken = [
        link
        for link in links
        if not link.startswith(("http://", "https://")) and not (page.parent / link).exists()
    ]
    assert not broken, f"{page.name} links to nothing: {broken}"


def test_the_readme_is_a_newcomers_page_short_paragraphs_and_the_two_commands_first() -> None:
    text = README.read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    paragraphs = [
        p for p in prose.split("\n\n") if p.strip() and not p.lstrip().startswith(("#", "- "))
    ]
    longest = max(len(p.strip().splitlines()) for p in paragraphs)
    assert longest <= 6, f"a README paragraph of {longest} lines: move the detail under docs/"
    assert len(text.splitlines()) < 200
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert sections[:3] == ["Two commands", "Deploy to a cluster", "Concepts"]
