"""Every vignette runs, at small size, through the renderer (vignettes/render.py).

A vignette whose code raises makes the renderer raise ``VignetteError``, so a
broken vignette fails here.  Each check also asserts that the rendered
Markdown contains every code cell's source and that every figure it links
exists, so a renderer that silently dropped output would fail too.
"""

import importlib.util
import re
from pathlib import Path

import pytest

VIGNETTES = Path(__file__).resolve().parent.parent / "vignettes"


def _renderer():
    spec = importlib.util.spec_from_file_location("ccme_vignette_render", VIGNETTES / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _renderer()


def test_parse_cells_splits_prose_and_code():
    text = "# %% [markdown]\n# # Title\n#\n# prose\n\n# %%\nx = 1\nx + 1\n# %%\n\n"
    assert render.parse_cells(text) == [("markdown", "# Title\n\nprose"), ("code", "x = 1\nx + 1")]


def test_broken_cell_names_the_vignette_and_cell(tmp_path, monkeypatch):
    (tmp_path / "broken.py").write_text("# %%\nx = 1\n# %%\nraise ValueError('boom')\n")
    monkeypatch.setattr(render, "HERE", tmp_path)
    with pytest.raises(render.VignetteError, match=r"'broken', cell 2 raised ValueError: boom"):
        render.render("broken", tmp_path / "out")


def test_output_warnings_and_figures_are_captured(tmp_path, monkeypatch):
    (tmp_path / "tiny.py").write_text(
        "# %%\nimport warnings\nimport matplotlib.pyplot as plt\nprint('hello')\n"
        "warnings.warn('careful')\nplt.plot([0, 1])\n1 + 1\n")
    monkeypatch.setattr(render, "HERE", tmp_path)
    render.render("tiny", tmp_path / "out")
    md = (tmp_path / "out" / "tiny.md").read_text()
    assert "hello\nUserWarning: careful\n2" in md
    assert (tmp_path / "out" / "figures" / "tiny-1.png").is_file()


@pytest.mark.parametrize("name", render.vignette_names())
def test_vignette_renders_small(name, tmp_path):
    render.render(name, tmp_path, small=True)
    md = (tmp_path / f"{name}.md").read_text()
    for kind, source in render.parse_cells((VIGNETTES / f"{name}.py").read_text()):
        if kind == "code":
            assert source in md
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", md):
        assert (tmp_path / link).is_file(), link
