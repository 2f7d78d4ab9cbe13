"""The Examples sections of the public API run and print what they say (doctest)."""

from __future__ import annotations

import doctest
import warnings

import pytest

import ccme._api
import ccme.embedding
import ccme.result

MODULES = [ccme._api, ccme.embedding, ccme.result]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)  # small example fits may clip scores
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
