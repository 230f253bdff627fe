"""How the bench says what it found: one table shape, one place and one format for results.

Every bench writes ``bench/results/NAME.json`` (its figures, for the next tool to read) and
``NAME.md`` (the same as a person reads it), through ``write``; every table in those pages is
made by ``table``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def log(message: str, *, who: str = "bench") -> None:
    """A progress line on stderr, timed: stdout is for the results."""
    print(f"[{who} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table: the header, the separator, a line a row (cells as ``str`` gives
    them, an empty one as ``| |``; a row shorter than the header is left short, as markdown
    allows)."""
    lines = [_row(header), "|" + " --- |" * len(header)]
    lines += [_row(row) for row in rows]
    return lines


def _row(cells: Sequence[object]) -> str:
    return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"


def write(
    name: str, results: object, markdown: str, *, into: Path = RESULTS, quiet: bool = True
) -> None:
    """``NAME.json`` and ``NAME.md`` under ``into``; the page on stdout too unless ``quiet``."""
    into.mkdir(parents=True, exist_ok=True)
    (into / f"{name}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (into / f"{name}.md").write_text(markdown)
    if not quiet:
        print(markdown)
