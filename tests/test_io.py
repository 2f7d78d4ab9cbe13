"""Safe save/load (ccme.io): bit-identical round trips, and clear errors on damaged or hostile files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
import zipfile

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import io as ccme_io
from ccme.errors import FormatError

FORMULA = "y ~ a | x1 + np.log(x2 + 3) + g | x3"


@pytest.fixture(scope="module")
def data():
    frame = ccme.datasets.paper_simulation(240, seed=3)
    rng = np.random.default_rng(0)
    frame["g"] = pd.Categorical(rng.choice(["low", "mid", "high"], len(frame)), categories=["low", "mid", "high"])
    return frame


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=5, **kwargs)


def _newdata(res):
    rows = res.profiles().copy()
    rows["g"] = pd.Categorical(["high", "low", "mid"], categories=["low", "mid", "high"])
    return rows


def _read_everything(res, grid, newdata):
    for arm in (1, 0):
        for nd in (None, newdata):
            res.mean(newdata=nd, arm=arm), res.var(newdata=nd, arm=arm), res.cdf(grid, newdata=nd, arm=arm)


def _assert_same(res, back):
    grid = res.default_grid(60)
    newdata = _newdata(res)
    # These small fits have V-points with a negative variance estimate or no mass: both results must warn
    # alike (the same messages, in the same order) and report the same NaN.
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always", ccme.CcmeWarning)
        _read_everything(res, grid, newdata)
    with warnings.catch_warnings(record=True) as second:
        warnings.simplefilter("always", ccme.CcmeWarning)
        _read_everything(back, grid, newdata)
    assert [str(w.message) for w in first] == [str(w.message) for w in second]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)  # compared above
        for arm in (1, 0):
            for nd in (None, newdata):
                np.testing.assert_array_equal(res.density(grid, newdata=nd, arm=arm),
                                              back.density(grid, newdata=nd, arm=arm))
                np.testing.assert_array_equal(res.cdf(grid, newdata=nd, arm=arm), back.cdf(grid, newdata=nd, arm=arm))
                np.testing.assert_array_equal(res.mean(newdata=nd, arm=arm), back.mean(newdata=nd, arm=arm))
                np.testing.assert_array_equal(res.var(newdata=nd, arm=arm), back.var(newdata=nd, arm=arm))
    assert str(res.summary()) == str(back.summary())
    pd.testing.assert_frame_equal(res.tidy(), back.tidy())
    pd.testing.assert_frame_equal(res.profiles(), back.profiles())
    assert (res.seed, res.call, res.method, res.mode, res.clip) == (back.seed, back.call, back.method, back.mode,
                                                                     back.clip)
    assert res.timing == back.timing and res.kernels == back.kernels and res.penalties == back.penalties
    for a, b in zip(res.folds, back.folds):
        np.testing.assert_array_equal(a.target, b.target)
        np.testing.assert_array_equal(a.nuisance, b.nuisance)
    np.testing.assert_array_equal(res.propensity_scores, back.propensity_scores)
    assert res.overlap.ess == back.overlap.ess and res.overlap.n_clipped == back.overlap.n_clipped
    for arm in (1, 0):
        assert res.outcome_kernel(arm) == back.outcome_kernel(arm)


@pytest.mark.parametrize("mode", ["dr", "ipw", "pi", "onestep"])
def test_ridge_round_trip_is_bit_identical(data, mode, tmp_path):
    res = _fit(data, mode=mode, folds=3, tune="auto" if mode == "dr" else "none")
    path = res.save(tmp_path / "fit.ccme")
    back = ccme.load(path)
    _assert_same(res, back)
    if mode == "dr":  # the automatic tuning's report survives with its curves, and the split fold-arms
        assert type(back.embedding(1).parts[0]).__name__ == "SplitSecondStage"
        assert back.tuning.chosen == res.tuning.chosen
        pd.testing.assert_frame_equal(back.tuning.to_frame(), res.tuning.to_frame())
    # unseen categorical levels are still refused by the rebuilt encoder
    bad = _newdata(res).astype({"g": object})
    bad.iloc[0, bad.columns.get_loc("g")] = "unknown"
    with pytest.raises(ccme.DataError, match="not seen"):
        back.density(res.default_grid(10), newdata=bad)


def test_lazy_arms_are_built_before_saving(data, tmp_path):
    """An unused result saves both arms; the loaded result equals the original once it builds them."""
    res = _fit(data, tune="none")
    assert not any(res.embeddings[arm]._parts.built for arm in (1, 0))
    back = ccme.load(res.save(tmp_path / "lazy.ccme"))
    assert all(back.embeddings[arm]._parts.built for arm in (1, 0))
    _assert_same(res, back)


@pytest.mark.parametrize("method, mode", [("deep_feature", m) for m in ("dr", "ipw", "pi", "onestep")]
                         + [("neural_kernel", m) for m in ("dr", "onestep")])
def test_neural_round_trip_is_bit_identical(data, method, mode, tmp_path):
    """Deep Feature's stored pieces differ by mode (first stage or not); Neural-Kernel's only by stage 1."""
    pytest.importorskip("torch")
    res = _fit(data.iloc[:160], method=method, mode=mode, epochs=(4, 4), hidden=(6,), M=5, validation=0.0,
               progress=False, tune="none")
    back = ccme.load(res.save(tmp_path / "neural.ccme"))
    grid = res.default_grid(40)
    with warnings.catch_warnings():
        # networks trained for 4 epochs leave many V-points without mass (NaN, with a warning, in both)
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        for arm in (1, 0):
            np.testing.assert_array_equal(res.density(grid, newdata=_newdata(res), arm=arm),
                                          back.density(grid, newdata=_newdata(res), arm=arm))
            np.testing.assert_array_equal(res.mean(arm=arm), back.mean(arm=arm))
    assert str(res.summary()) == str(back.summary())
    pd.testing.assert_frame_equal(res.training_history(), back.training_history())


def test_split_deep_feature_round_trip_is_bit_identical(data, tmp_path):
    """Deep Feature's split second stage (two fold-arms over one network, the plug-in part's atom mask) is stored."""
    pytest.importorskip("torch")
    from ccme.estimators.base import SplitSecondStage

    res = _fit(data.iloc[:160], method="deep_feature", epochs=(4, 4), hidden=(6,), M=5, validation=0.0,
               progress=False, tune="none", lam1_plugin=1e-3)
    assert all(isinstance(part, SplitSecondStage) for part in res.embeddings[1].parts)
    back = ccme.load(res.save(tmp_path / "split.ccme"))
    V = res.design.V[:5]
    for arm in (1, 0):
        for got, want in zip(back.embeddings[arm].parts, res.embeddings[arm].parts):
            assert isinstance(got, SplitSecondStage)
            np.testing.assert_array_equal(got.weights(V)[1], want.weights(V)[1])
            np.testing.assert_array_equal(got.atom_units, want.atom_units)
    assert back.penalties == res.penalties


def test_file_holds_only_json_and_plain_arrays(data, tmp_path):
    """Every entry is JSON or an .npy array that NumPy reads with allow_pickle=False; factors are packed."""
    res = _fit(data, tune="none")
    path = res.save(tmp_path / "fit.ccme")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        meta = json.loads(zf.read("ccme.json"))
        assert set(names) == {"ccme.json", "ccme.json.sha256"} | {f"arrays/{k}.npy" for k in meta["arrays"]}
        for name in names:
            if name.endswith(".npy"):
                with zf.open(name) as handle:
                    assert np.load(handle, allow_pickle=False).dtype != object
    assert meta["format_version"] == ccme_io.FORMAT_VERSION
    # each Cholesky factor is stored as its packed lower triangle, each distinct array once
    part = res.embeddings[1].parts[0]
    n = part.L_V.shape[0]
    assert [n * (n + 1) // 2] in [info["shape"] for info in meta["arrays"].values()]
    assert json.dumps(meta).count('"tril"') >= 2


def _rewrite(path, out, *, meta=None, digest=True, entries=None):
    """Copy the archive, replacing its metadata (with a matching checksum unless ``digest=False``) or entries."""
    with zipfile.ZipFile(path) as zf:
        contents = {name: zf.read(name) for name in zf.namelist()}
    if meta is not None:
        raw = json.dumps(meta).encode()
        contents["ccme.json"] = raw
        if digest:
            contents["ccme.json.sha256"] = hashlib.sha256(raw).hexdigest().encode()
    contents.update(entries or {})
    with zipfile.ZipFile(out, "w") as zf:
        for name, raw in contents.items():
            zf.writestr(name, raw)
    return out


@pytest.fixture(scope="module")
def saved(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("io") / "fit.ccme"
    _fit(data, tune="none").save(path)
    with zipfile.ZipFile(path) as zf:
        meta = json.loads(zf.read("ccme.json"))
    return path, meta


def test_truncated_and_garbage_files(saved, tmp_path):
    path, _ = saved
    raw = path.read_bytes()
    for cut in (10, len(raw) // 2, len(raw) - 30):
        (tmp_path / "cut.ccme").write_bytes(raw[:cut])
        with pytest.raises(FormatError, match="not a ccme file|truncated|damaged"):
            ccme.load(tmp_path / "cut.ccme")
    (tmp_path / "text.ccme").write_text("hello")
    with pytest.raises(FormatError, match="not a ccme file"):
        ccme.load(tmp_path / "text.ccme")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "not ccme")
    with pytest.raises(FormatError, match="no ccme.json"):
        ccme.load(tmp_path / "other.zip")


def test_flipped_bytes_are_detected(saved, tmp_path):
    """A changed byte in any array is caught (by the zip CRC or the array's SHA-256)."""
    path, meta = saved
    with zipfile.ZipFile(path) as zf:
        name = f"arrays/{next(iter(meta['arrays']))}.npy"
        raw = bytearray(zf.read(name))
    raw[-1] ^= 0xFF
    out = _rewrite(path, tmp_path / "flip.ccme", entries={name: bytes(raw)})  # valid zip, wrong content
    with pytest.raises(FormatError, match="checksum of arrays/"):
        ccme.load(out)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    data[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF  # inside the stored entry
    (tmp_path / "crc.ccme").write_bytes(bytes(data))
    with pytest.raises(FormatError, match="damaged|altered"):
        ccme.load(tmp_path / "crc.ccme")


def test_edited_metadata_is_detected(saved, tmp_path):
    path, meta = saved
    edited = json.loads(json.dumps(meta))
    edited["state"]["seed"] = 99
    with pytest.raises(FormatError, match="altered or damaged.*ccme.json"):
        ccme.load(_rewrite(path, tmp_path / "edit.ccme", meta=edited, digest=False))


def test_newer_format_version_is_refused(saved, tmp_path):
    path, meta = saved
    newer = dict(meta, format_version=ccme_io.FORMAT_VERSION + 1)
    with pytest.raises(FormatError, match=rf"version {ccme_io.FORMAT_VERSION + 1}.*version {ccme_io.FORMAT_VERSION}"):
        ccme.load(_rewrite(path, tmp_path / "newer.ccme", meta=newer))


def test_hostile_content_is_refused_without_running_it(saved, tmp_path, monkeypatch):
    """A file with a recomputed checksum still cannot make loading run code."""
    path, meta = saved
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    # 1. a formula whose V term is Python code (formulaic would evaluate it to build V's encoder)
    hostile = json.loads(json.dumps(meta))
    fields = hostile["state"]["design"]["formula"]
    code = "I(open('pwned', 'w'))"
    fields["text"] = fields["text"].replace("np.log(x2 + 3)", code)
    fields["conditioning"] = fields["conditioning"].replace("np.log(x2 + 3)", code)
    with pytest.raises(FormatError, match="may not"):
        ccme.load(_rewrite(path, tmp_path / "code.ccme", meta=hostile))
    for text in ("x1 + np.load(x2)", "x1 + exec('1')", "x1 + I(x2.__class__)", "x1 + I(np)", "x1 + I(x2[0])"):
        hostile = json.loads(json.dumps(meta))
        fields = hostile["state"]["design"]["formula"]
        fields["text"] = fields["text"].replace("x1 + np.log(x2 + 3) + g", text)
        with pytest.raises(FormatError):
            ccme.load(_rewrite(path, tmp_path / "code2.ccme", meta=hostile))
    assert not marker.exists()
    # 2. a type name of the file's choosing: fold-arms are rebuilt only through the package's own types
    for name in ("os:system", "subprocess.Popen", "ccme._api.fit", "ccme.Embedding"):
        hostile = json.loads(json.dumps(meta))
        hostile["state"]["embeddings"]["1"]["parts"][0]["schema"] = name
        with pytest.raises(FormatError, match="unknown schema"):
            ccme.load(_rewrite(path, tmp_path / "class.ccme", meta=hostile))
    # 3. an object (pickled) array in place of a numeric one
    hostile = json.loads(json.dumps(meta))
    name = next(iter(hostile["arrays"]))
    buffer = __import__("io").BytesIO()
    np.lib.format.write_array(buffer, np.array([object()], dtype=object), allow_pickle=True)
    raw = buffer.getvalue()
    hostile["arrays"][name].update(sha256=hashlib.sha256(raw).hexdigest(), dtype="|O", shape=[1])
    with pytest.raises(FormatError, match="without pickle"):
        ccme.load(_rewrite(path, tmp_path / "pickle.ccme", meta=hostile, entries={f"arrays/{name}.npy": raw}))


def test_results_are_immutable_and_a_failed_save_leaves_no_file(data, tmp_path, monkeypatch):
    res = _fit(data, tune="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.note = "x"
    with pytest.raises(AttributeError, match="immutable"):
        res.embedding(1).y_kernel = None
    with pytest.raises(TypeError):
        res.params["lam0"] = {1: 1.0, 0: 1.0}
    # a part of the fit whose state holds something the codec refuses: a named error, and no file
    from ccme.estimators.ridge import RidgeFoldArm

    original = RidgeFoldArm.to_state
    monkeypatch.setattr(RidgeFoldArm, "to_state", lambda self: {**original(self), "note": object()})
    with pytest.raises(FormatError, match="note"):
        res.save(tmp_path / "bad.ccme")
    assert not (tmp_path / "bad.ccme").exists() and not list(tmp_path.iterdir())
