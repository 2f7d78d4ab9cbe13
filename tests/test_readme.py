"""Every python block of README.md runs as pasted, in order, in one namespace.

A reader pastes the blocks one after the other into one session, so the test
does the same: a block may use what an earlier one defined, and nothing else.
The blocks run in a temporary working directory (``res.save("fit.ccme")``
writes there) with matplotlib's Agg backend.
"""

import re
import time
import warnings
from pathlib import Path

import matplotlib
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of ``text``, each with the line its code starts on."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_blocks_are_found():
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    assert "import ccme" in blocks[0][1]  # the first block imports what the others use


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pytest.importorskip("torch")  # the neural estimators' block needs the optional extra
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    timings = []
    for line, code in python_blocks(README.read_text(encoding="utf-8")):
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the examples' warnings (clipping, ...) are not what is tested here
            try:
                exec(compile(code, f"README.md, block at line {line}", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"README.md's python block at line {line} fails as pasted: {exc!r}") from exc
            finally:
                plt.close("all")
        timings.append((line, time.perf_counter() - started))
    print("README blocks (line, seconds):", [(line, round(t, 1)) for line, t in timings])
