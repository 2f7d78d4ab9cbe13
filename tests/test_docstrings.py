"""The Examples sections of the public API run and print what they say (doctest), and the docstrings are complete."""

from __future__ import annotations

import doctest
import inspect
import re
import warnings

import pytest

import ccme
import ccme._api
import ccme.bootstrap
import ccme.datasets
import ccme.datasets.ihdp
import ccme.datasets.paper
import ccme.datasets.real
import ccme.embedding
import ccme.result

MODULES = [
    ccme._api,
    ccme.embedding,
    ccme.result,
    ccme.bootstrap,
    ccme.datasets.paper,
    ccme.datasets.ihdp,
    ccme.datasets.real,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_examples_run(module, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ccme.CcmeWarning)  # small example fits may clip scores
            result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    finally:
        plt.close("all")  # the plot methods' examples open figures
    assert result.attempted > 0
    assert result.failed == 0


# ---------------------------------------------------------------------------
# numpydoc completeness of the public methods and functions
# ---------------------------------------------------------------------------
CLASSES = [ccme.CCMEResult, ccme.Embedding, ccme.Bands, ccme.EffectTest]
FUNCTIONS = [ccme.load] + [getattr(ccme.datasets, name) for name in ccme.datasets.__all__
                           if inspect.isfunction(getattr(ccme.datasets, name))]
_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}$", re.MULTILINE)
_CCME_ERRORS = "|".join(name for name in ccme.errors.__all__ if name.endswith("Error"))


def _public_methods():
    for cls in CLASSES:
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") or not (inspect.isfunction(member) or inspect.ismethod(member)):
                continue
            yield pytest.param(member, id=f"{cls.__name__}.{name}")


def _sections(doc: str) -> dict:
    """Section name → its body, for the numpydoc sections of a cleaned docstring."""
    heads = list(_SECTION.finditer(doc))
    return {m.group(1): doc[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
            for i, m in enumerate(heads)}


def _documented_parameters(body: str) -> dict:
    """Parameter name (``*args``/``**kwargs`` with their stars) → its type line."""
    out = {}
    for line in body.splitlines():
        if not line or line[0].isspace():
            continue
        names, _, spec = line.partition(" : ")
        for name in names.split(", "):
            out[name.strip()] = spec.strip()
    return out


def _check(fn) -> list:
    doc = inspect.getdoc(fn) or ""
    problems = []
    summary = doc.split("\n\n")[0]
    if not summary or "\n" in summary:
        problems.append("the summary is not one line")
    sections = _sections(doc)
    signature = inspect.signature(fn)
    parameters = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    needed = ["Returns", "Examples"] + (["Parameters"] if parameters else [])
    problems += [f"no {s} section" for s in needed if s not in sections]
    if "Examples" in sections and ">>>" not in sections["Examples"]:
        problems.append("the Examples section has no doctest")
    if re.search(rf"raise (\w+\.)*({_CCME_ERRORS})\b", inspect.getsource(fn)) and "Raises" not in sections:
        problems.append("raises a ccme error but has no Raises section")
    documented = _documented_parameters(sections.get("Parameters", ""))
    for p in parameters:
        name = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if name not in documented:
            problems.append(f"parameter {name!r} is not documented")
        elif p.default is not p.empty:
            written = re.search(r"default (.+)$", documented[name])
            if written is None or written.group(1).replace('"', "'") != repr(p.default):
                problems.append(f"parameter {name!r}: the type line does not end in ', default {p.default!r}'")
    return problems


@pytest.mark.parametrize("fn", list(_public_methods()))
def test_public_methods_are_documented(fn):
    assert _check(fn) == []


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_public_functions_are_documented(fn):
    assert _check(fn) == []


def test_the_completeness_check_sees_gaps():
    def undocumented(self, x, *, arm=1):
        """Two
        lines.

        Parameters
        ----------
        x : int
        arm : int
        """
        raise ccme.ParameterError("x")

    problems = _check(undocumented)
    assert "the summary is not one line" in problems
    assert "no Returns section" in problems and "no Examples section" in problems
    assert "raises a ccme error but has no Raises section" in problems
    assert "parameter 'arm': the type line does not end in ', default 1'" in problems
    assert len(list(_public_methods())) > 40


def _modules():
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(ccme.__path__, "ccme."):
        if info.name != "ccme.__main__":
            yield importlib.import_module(info.name)


def test_every_name_in_all_exists():
    """``from ccme.<module> import *`` works: each module's ``__all__`` names only what the module defines."""
    missing = [f"{module.__name__}.{name}" for module in _modules()
               for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert missing == []
