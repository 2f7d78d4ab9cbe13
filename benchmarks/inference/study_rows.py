"""The inference studies' results files: one JSON line per data set, appended as each finishes.

A study is resumable: it reads the rows already written (:func:`read_rows`),
skips the data sets they cover, and appends each new row at once
(:func:`append_row`), so an interrupted run, or two shards writing to their
own files, loses at most the data set in progress.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_rows(path: Path) -> list[dict]:
    """Every row of a results file, in the order written; none if it does not exist yet."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def append_row(path: Path, row: dict) -> None:
    """Append one row (creating the file and its folder on the first)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def select_dropped(rows: list[dict], dropped: str) -> list[dict]:
    """``rows`` for ``dropped`` "all"; for "yes" (or "no") those whose fit dropped a V covariate (or dropped none).

    Rows that do not record it (``dropped``, written before the studies did) are left out unless "all".
    """
    if dropped == "all":
        return rows
    return [r for r in rows if "dropped" in r and bool(r["dropped"]) == (dropped == "yes")]
