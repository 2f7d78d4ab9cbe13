"""Render the ccme vignettes: execute a percent-format script and write Markdown.

A vignette is a Python script in the "percent" format: ``# %% [markdown]``
cells hold prose (each line starts with ``#``), ``# %%`` cells hold code.
The renderer executes the code cells in order in one namespace, captures what
each cell prints (and the warnings it emits, as a notebook shows them), shows
the value of a cell's last expression as a notebook would, saves every
matplotlib figure the cell leaves open as ``figures/<name>-<k>.png``, and
writes ``<name>.md`` with the prose, the code, its output and the figures.

Usage (from the repository root)::

    python vignettes/render.py                  # every vignette, full size, into vignettes/
    python vignettes/render.py nsw nhefs        # some of them
    python vignettes/render.py --small --out /tmp/v   # tiny sizes (CCME_VIGNETTE_SMALL=1), elsewhere

A cell that raises stops the rendering with an error naming the vignette and
the cell, so a broken vignette cannot be rendered (and fails the tests).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import sys
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
DPI = 90


class VignetteError(RuntimeError):
    """A vignette's code cell raised; names the vignette and the cell."""


def vignette_names() -> list[str]:
    """The vignettes in this directory (every ``*.py`` but the renderer), in file-name order."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.name != Path(__file__).name)


def parse_cells(text: str) -> list[tuple[str, str]]:
    """Split a percent-format script into ``[(kind, source)]`` with kind "markdown" or "code"."""
    cells, kind, lines = [], None, []

    def close():
        if kind is not None:
            source = "\n".join(lines).strip("\n")
            if source.strip():
                cells.append((kind, source))

    for line in text.splitlines():
        if line.startswith("# %%"):
            close()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            # Prose lines are "# text" or a bare "#" (a blank line).
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        elif kind == "code":
            lines.append(line)
    close()
    return cells


def _run_cell(source: str, namespace: dict, label: str) -> str:
    """Execute one code cell; return its printed output, warnings and last expression's value."""
    buffer = io.StringIO()
    tree = ast.parse(source, filename=label)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)

    def show(message, category, filename, lineno, file=None, line=None):
        buffer.write(f"{category.__name__}: {message}\n")

    with warnings.catch_warnings():
        warnings.showwarning = show
        with contextlib.redirect_stdout(buffer):
            exec(compile(tree, label, "exec"), namespace)
            if last is not None:
                value = eval(compile(last, label, "eval"), namespace)
                if value is not None and not _is_plot_object(value):
                    print(value.to_string() if hasattr(value, "to_string") else repr(value))
    return buffer.getvalue()


def _is_plot_object(value) -> bool:
    module = type(value).__module__ or ""
    if isinstance(value, (list, tuple)) and value:
        return all(_is_plot_object(v) for v in value)
    return module.startswith("matplotlib")


def render(name: str, out_dir=None, small: bool = False) -> float:
    """Execute ``vignettes/<name>.py`` and write ``<out_dir>/<name>.md`` and its figures.

    Returns the seconds the execution took.  ``small=True`` sets
    ``CCME_VIGNETTE_SMALL=1`` for the run (vignettes then use tiny sizes).
    """
    out_dir = Path(out_dir) if out_dir is not None else HERE
    figures = out_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    for old in figures.glob(f"{name}-*.png"):
        old.unlink()
    cells = parse_cells((HERE / f"{name}.py").read_text())
    previous = os.environ.get("CCME_VIGNETTE_SMALL")
    os.environ["CCME_VIGNETTE_SMALL"] = "1" if small else "0"
    namespace = {"__name__": "__main__"}
    parts, k = [], 0
    plt.close("all")
    start = time.perf_counter()
    try:
        for index, (kind, source) in enumerate(cells, 1):
            if kind == "markdown":
                parts.append(source)
                continue
            label = f"<vignette {name}, cell {index}>"
            try:
                output = _run_cell(source, namespace, label)
            except Exception as exc:
                raise VignetteError(f"vignette {name!r}, cell {index} raised {type(exc).__name__}: {exc}") from exc
            parts.append(f"```python\n{source}\n```")
            if output.strip():
                parts.append(f"```text\n{output.rstrip()}\n```")
            for number in plt.get_fignums():
                k += 1
                fig = plt.figure(number)
                fig.savefig(figures / f"{name}-{k}.png", dpi=DPI, bbox_inches="tight")
                parts.append(f"![{name} figure {k}](figures/{name}-{k}.png)")
            plt.close("all")
    finally:
        if previous is None:
            os.environ.pop("CCME_VIGNETTE_SMALL", None)
        else:
            os.environ["CCME_VIGNETTE_SMALL"] = previous
    seconds = time.perf_counter() - start
    header = (f"<!-- Rendered from vignettes/{name}.py by `python vignettes/render.py {name}`"
              f"{' --small' if small else ''}; do not edit by hand. -->")
    (out_dir / f"{name}.md").write_text(header + "\n\n" + "\n\n".join(parts) + "\n")
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="vignettes to render (default: all)")
    parser.add_argument("--small", action="store_true", help="tiny sizes (CCME_VIGNETTE_SMALL=1)")
    parser.add_argument("--out", default=None, help="output directory (default: vignettes/)")
    args = parser.parse_args(argv)
    names = args.names or vignette_names()
    unknown = sorted(set(names) - set(vignette_names()))
    if unknown:
        parser.error(f"unknown vignette(s) {unknown}; available: {vignette_names()}")
    for name in names:
        seconds = render(name, args.out, small=args.small)
        print(f"{name}: {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
