"""The file codec (ccme.io) and the versioned states of the leaf types (to_state / from_state).

The codec: exact round trips of every kind of state value, and a named
FormatError for every kind of damaged, edited, hostile or foreign file.  The
leaf types: to_state → write → read → from_state gives back an equal object.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ccme
from ccme import io as codec
from ccme.crossfit import Fold
from ccme.errors import FormatError
from ccme.formula import Design, Formula, Treatment, build_design, parse_formula
from ccme.kernels import Kernel
from ccme.propensity import Overlap
from ccme.tuning import TuningCurve, TuningReport


def _nan_with_bits(bits: int, dtype) -> np.generic:
    dtype = np.dtype(dtype)
    return np.array(bits, dtype=f"u{dtype.itemsize}").view(dtype)[()]


def _every_leaf() -> dict:
    rng = np.random.default_rng(0)
    factor = np.tril(rng.normal(size=(6, 6)))
    signed_zero = factor.copy()
    signed_zero[0, 3] = -0.0  # zero, but not zero bits: must not be packed away
    return {
        "none": None, "true": True, "false": False, "int": -7, "big": 2**80, "float": 0.1, "neg_zero": -0.0,
        "nan": math.nan, "inf": math.inf, "minus_inf": -math.inf, "str": "λ₁ = 0.01 ∑ `x`", "empty": "",
        "nan_payload": float(_nan_with_bits(0x7FF8000000000123, np.float64)),
        "f64": np.float64(1 / 3), "f32": np.float32(0.1), "f16": np.float16(-2.5), "i8": np.int8(-128),
        "u64": np.uint64(2**64 - 1), "b": np.bool_(True), "c64": np.complex64(1 - 2j),
        "c128": np.complex128(complex(math.nan, -math.inf)), "f32_nan": -np.float32("nan"),
        "f64_nan": _nan_with_bits(0xFFF0000000000001, np.float64), "long": np.longdouble(1) / 3,
        "vector": rng.normal(size=7), "matrix": rng.normal(size=(3, 4)),
        "fortran": np.asfortranarray(rng.normal(size=(3, 4))),
        "ints": np.arange(5, dtype=np.intp), "big_endian": np.arange(4, dtype=">i4"), "bools": rng.random(5) > 0.5,
        "complex": rng.normal(size=3) + 1j, "float32": rng.normal(size=(2, 2)).astype(np.float32),
        "zero_d": np.array(2.5), "empty_array": np.zeros((0, 3)), "special": np.array([np.nan, np.inf, -np.inf, -0.0]),
        "factor": factor, "factor_again": factor.copy(), "signed_zero": signed_zero,
        "strided": np.arange(10.0)[::3],
        "list": [1, "two", [3.0, None], {"four": np.arange(2)}], "empty_list": [], "empty_dict": {},
        "$": {"$": "array", "ref": "not a reference"},  # user keys that look like the codec's tags
        "order": {"1": "one", "0": "zero", "b": 2, "a": 1},
        "nested": {"deeper": {"deepest": [np.float32(1.5), np.eye(2)]}},
    }


def _assert_identical(a, b, where="state"):
    """Equal values of equal types; arrays bit for bit with dtype, shape and memory order."""
    if isinstance(a, np.ndarray):
        assert type(b) is np.ndarray, where
        assert (a.dtype.str, a.shape) == (b.dtype.str, b.shape), where
        assert a.tobytes(order="A") == b.tobytes(order="A"), where
        if a.flags.c_contiguous or a.flags.f_contiguous:
            assert (a.flags.c_contiguous, a.flags.f_contiguous) == (b.flags.c_contiguous, b.flags.f_contiguous), where
        return
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, (float, np.generic)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, where


def _meta(path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("ccme.json"))


def _rewrite(path, out, *, meta=None, digest=True, entries=None, drop=()):
    """Copy an archive, replacing its metadata (with a matching checksum unless ``digest=False``) or entries."""
    with zipfile.ZipFile(path) as zf:
        contents = {name: zf.read(name) for name in zf.namelist() if name not in drop}
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


# ---------------------------------------------------------------------------
# the codec: round trips
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("compress", [False, True])
def test_every_leaf_round_trips_exactly(tmp_path, compress):
    state = _every_leaf()
    path = codec.write_archive(tmp_path / "state.ccme", state, compress=compress)
    back = codec.read_archive(path)
    _assert_identical(state, back)
    # two references to one stored array come back as two arrays
    assert not np.shares_memory(back["factor"], back["factor_again"])


def test_archive_layout(tmp_path):
    """Only JSON and .npy entries readable without pickle; factors packed; equal arrays stored once."""
    state = _every_leaf()
    path = codec.write_archive(tmp_path / "state.ccme", state)
    meta = _meta(path)
    assert (meta["format"], meta["format_version"]) == (codec.FORMAT, codec.FORMAT_VERSION)
    assert meta["ccme_version"] == ccme.__version__
    with zipfile.ZipFile(path) as zf:
        assert set(zf.namelist()) == {"ccme.json", "ccme.json.sha256"} | {f"arrays/{k}.npy" for k in meta["arrays"]}
        assert zf.read("ccme.json.sha256").decode() == hashlib.sha256(zf.read("ccme.json")).hexdigest()
        for name, info in meta["arrays"].items():
            raw = zf.read(f"arrays/{name}.npy")
            assert hashlib.sha256(raw).hexdigest() == info["sha256"]
            assert np.load(io.BytesIO(raw), allow_pickle=False).dtype != object
    refs = meta["state"]["items"]  # the root has a "$" key, so it is written escaped
    tril = {name: info.get("tril") for name, info in meta["arrays"].items()}
    assert meta["arrays"][refs["factor"]["ref"]]["shape"] == [21] and tril[refs["factor"]["ref"]] == 6
    assert tril[refs["signed_zero"]["ref"]] is None  # -0.0 above the diagonal: stored whole, so kept exactly
    assert tril[refs["nested"]["deeper"]["deepest"][1]["ref"]] == 2  # np.eye(2) is lower triangular too
    assert tril[refs["matrix"]["ref"]] is None and tril[refs["fortran"]["ref"]] is None
    assert refs["factor"] == refs["factor_again"] and refs["factor"]["$"] == "array"
    assert refs["nan"] == {"$": "float", "value": "nan"} and refs["minus_inf"] == {"$": "float", "value": "-inf"}
    assert refs["f32"] == {"$": "scalar", "dtype": "<f4", "value": float(np.float32(0.1))}
    assert refs["$"]["$"] == "dict" and refs["$"]["items"]["$"] == "array"  # user dicts with a "$" key, escaped


def test_same_state_gives_the_same_bytes(tmp_path):
    state = _every_leaf()
    a = codec.write_archive(tmp_path / "a.ccme", state).read_bytes()
    b = codec.write_archive(tmp_path / "b.ccme", state).read_bytes()
    assert a == b


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.floats(width=32).map(np.float32), st.integers(-(2**63), 2**63 - 1).map(np.int64),
)
_arrays = st.sampled_from(["<f8", ">f8", "<f4", "<i4", "|u1", "|b1", "<c16"]).flatmap(
    lambda dtype: st.lists(st.integers(0, 255), min_size=0, max_size=24).map(
        lambda raw: np.frombuffer(bytes(raw[: len(raw) - len(raw) % np.dtype(dtype).itemsize]), dtype=dtype).copy()
    )
)
_states = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=20,
)


@given(state=st.dictionaries(st.text(max_size=6), _states, max_size=5))
def test_random_states_round_trip(tmp_path_factory, state):
    path = tmp_path_factory.mktemp("random") / "state.ccme"
    _assert_identical(state, codec.read_archive(codec.write_archive(path, state)))


# ---------------------------------------------------------------------------
# the codec: what it refuses to write
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("state, message", [
    ({"t": (1, 2)}, r"state\['t'\].*tuple.*lists, not tuples"),
    ({"arms": {1: 0.5}}, r"state\['arms'\].*key 1 is not a str.*str_keys"),
    ({"o": np.array([object()])}, r"state\['o'\].*dtype object.*pickle"),
    ({"s": np.array(["a", "b"])}, r"state\['s'\].*dtype <U1"),
    ({"d": np.array(["2020-01-01"], dtype="datetime64[D]")}, r"state\['d'\].*datetime64"),
    ({"x": {"y": [1, {2, 3}]}}, r"state\['x'\]\['y'\]\[1\].*set"),
    ({"u": np.str_("a")}, r"state\['u'\].*NumPy scalar of dtype <U1"),
    ({"f": pd.DataFrame({"a": [1]})}, r"state\['f'\].*DataFrame"),
    ([1, 2], r"a state is a dict"),
])
def test_unstorable_values_are_named(tmp_path, state, message):
    (tmp_path / "keep.ccme").write_bytes(b"previous")
    with pytest.raises(FormatError, match=message):
        codec.write_archive(tmp_path / "keep.ccme", state)
    assert (tmp_path / "keep.ccme").read_bytes() == b"previous"  # not replaced, and no temporary left
    assert [p.name for p in tmp_path.iterdir()] == ["keep.ccme"]


# ---------------------------------------------------------------------------
# the codec: damaged, edited, hostile and foreign files
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("codec") / "state.ccme"
    codec.write_archive(path, {"schema": "test.State", "version": 1, "x": np.arange(400.0), "y": [1.5, "a"]})
    return path, _meta(path)


def test_truncated_and_garbage_files(written, tmp_path):
    path, _ = written
    raw = path.read_bytes()
    for cut in (0, 10, len(raw) // 2, len(raw) - 30):
        (tmp_path / "cut.ccme").write_bytes(raw[:cut])
        with pytest.raises(FormatError, match="not a ccme file|truncated|damaged"):
            codec.read_archive(tmp_path / "cut.ccme")
    (tmp_path / "text.ccme").write_text("hello")
    with pytest.raises(FormatError, match="not a ccme file"):
        codec.read_archive(tmp_path / "text.ccme")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "not ccme")
    with pytest.raises(FormatError, match="no ccme.json"):
        codec.read_archive(tmp_path / "other.zip")
    with pytest.raises(FileNotFoundError):
        codec.read_archive(tmp_path / "missing.ccme")


def test_flipped_bytes_are_detected(written, tmp_path):
    """A changed byte in an array is caught by the array's SHA-256 (valid zip) or by the zip's CRC."""
    path, meta = written
    name = f"arrays/{next(iter(meta['arrays']))}.npy"
    with zipfile.ZipFile(path) as zf:
        raw = bytearray(zf.read(name))
        info = zf.getinfo(name)
    raw[-1] ^= 0xFF
    with pytest.raises(FormatError, match=f"altered or damaged: the checksum of {name}"):
        codec.read_archive(_rewrite(path, tmp_path / "flip.ccme", entries={name: bytes(raw)}))
    data = bytearray(path.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF  # inside the stored entry
    (tmp_path / "crc.ccme").write_bytes(bytes(data))
    with pytest.raises(FormatError, match="damaged|altered"):
        codec.read_archive(tmp_path / "crc.ccme")


def test_edited_metadata_is_detected(written, tmp_path):
    path, meta = written
    edited = json.loads(json.dumps(meta))
    edited["state"]["y"][0] = 2.5
    with pytest.raises(FormatError, match="altered or damaged: the checksum of ccme.json"):
        codec.read_archive(_rewrite(path, tmp_path / "edit.ccme", meta=edited, digest=False))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["state"].update(x={"$": "array", "ref": "a9"}), "refers to an array 'a9'"),
    (lambda m: m["state"].update(y={"$": "pickle", "data": "..."}), "unknown tag 'pickle'"),
    (lambda m: m["state"].update(y={"$": "float", "value": "1e999x"}), "bad float"),
    (lambda m: m["state"].update(y={"$": "scalar", "dtype": "|O", "value": 1}), "Python objects"),
    (lambda m: m["state"].update(y={"$": "scalar", "dtype": "<i1", "value": 300}), "does not fit"),
    (lambda m: m["arrays"]["a0"].update(shape=[10**6]), "holds .* bytes, but the manifest"),
    (lambda m: m["arrays"]["a0"].update(dtype="<f4", shape=[800]), "manifest says <f4"),
    (lambda m: m["arrays"]["a0"].update(tril=3), "packed triangle"),
    (lambda m: m.pop("arrays"), "lacks its array manifest"),
    (lambda m: m.update(state=[1]), "not a JSON object"),
])
def test_inconsistent_metadata_is_named(written, tmp_path, edit, message):
    """Metadata edited with a recomputed checksum still fails with a named FormatError, never a KeyError."""
    path, meta = written
    edited = json.loads(json.dumps(meta))
    edit(edited)
    with pytest.raises(FormatError, match=message):
        codec.read_archive(_rewrite(path, tmp_path / "edit.ccme", meta=edited))


def test_missing_entries(written, tmp_path):
    path, meta = written
    name = f"arrays/{next(iter(meta['arrays']))}.npy"
    with pytest.raises(FormatError, match=f"array entry {name} is missing"):
        codec.read_archive(_rewrite(path, tmp_path / "a.ccme", drop=(name,)))
    with pytest.raises(FormatError, match="no ccme.json.sha256"):
        codec.read_archive(_rewrite(path, tmp_path / "b.ccme", drop=("ccme.json.sha256",)))


def test_json_nan_constants_are_refused(written, tmp_path):
    path, meta = written
    raw = json.dumps(meta).replace('"y": [1.5', '"y": [NaN').encode()
    assert b"NaN" in raw
    entries = {"ccme.json": raw, "ccme.json.sha256": hashlib.sha256(raw).hexdigest().encode()}
    with pytest.raises(FormatError, match="not valid JSON.*NaN"):
        codec.read_archive(_rewrite(path, tmp_path / "nan.ccme", entries=entries))


def test_pickled_arrays_are_refused(written, tmp_path, monkeypatch):
    """An object array (which only pickle can read) is refused, whether the manifest admits it or not."""
    path, meta = written
    monkeypatch.chdir(tmp_path)
    name = next(iter(meta["arrays"]))
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.array([print], dtype=object), allow_pickle=True)
    raw = buffer.getvalue()
    honest = json.loads(json.dumps(meta))
    honest["arrays"][name].update(sha256=hashlib.sha256(raw).hexdigest(), dtype="|O", shape=[1])
    with pytest.raises(FormatError, match="Python objects.*pickle"):
        codec.read_archive(_rewrite(path, tmp_path / "p1.ccme", meta=honest, entries={f"arrays/{name}.npy": raw}))
    # the manifest claims floats of the entry's size, the .npy header says object
    lying = json.loads(json.dumps(meta))
    lying["arrays"][name].update(sha256=hashlib.sha256(raw).hexdigest(), dtype="<f8", shape=[(len(raw) - 128) // 8])
    with pytest.raises(FormatError, match="without pickle"):
        codec.read_archive(_rewrite(path, tmp_path / "p2.ccme", meta=lying, entries={f"arrays/{name}.npy": raw}))


def test_newer_codec_version_is_refused(written, tmp_path):
    path, meta = written
    newer = dict(meta, format_version=codec.FORMAT_VERSION + 1)
    version, ours = codec.FORMAT_VERSION + 1, codec.FORMAT_VERSION
    with pytest.raises(FormatError, match=rf"format version {version}.*reads format version {ours}.*upgrade ccme"):
        codec.read_archive(_rewrite(path, tmp_path / "newer.ccme", meta=newer))
    # the version is read before the checksum: a later format may hash differently
    with pytest.raises(FormatError, match=rf"format version {version}"):
        codec.read_archive(_rewrite(path, tmp_path / "newer2.ccme", meta=newer, digest=False))


def test_file_of_the_first_format_asks_to_refit(tmp_path):
    """ccme 0.1 saved results as 'ccme.result' format version 1 (the result's attributes): refit, no KeyError."""
    old = {"format": "ccme.result", "format_version": 1, "ccme_version": "0.1.0",
           "arrays": {"a0": {"dtype": "<f8", "shape": [2], "sha256": "0" * 64}},
           "result": {"seed": 1, "design": {"$": "dataclass", "type": "ccme.formula:Design", "fields": {}}}}
    raw = json.dumps(old).encode()
    with zipfile.ZipFile(tmp_path / "old.ccme", "w") as zf:
        zf.writestr("ccme.json", raw)
        zf.writestr("ccme.json.sha256", hashlib.sha256(raw).hexdigest())
        zf.writestr("arrays/a0.npy", b"")
    expected = rf"format version 1 \(by ccme 0.1.0\).*reads format version {codec.FORMAT_VERSION} only.*ccme.fit"
    with pytest.raises(FormatError, match=expected):
        codec.read_archive(tmp_path / "old.ccme")
    with pytest.raises(FormatError, match=expected):
        codec.read_object(tmp_path / "old.ccme", Formula.from_state)


# ---------------------------------------------------------------------------
# schemas and keys
# ---------------------------------------------------------------------------
def test_check_schema():
    state = codec.make_state("test.Thing", 2, a=1, b=[2])
    assert state == {"schema": "test.Thing", "version": 2, "a": 1, "b": [2]}
    assert codec.check_schema(state, "test.Thing", 2, keys=("a", "b")) == 2
    assert codec.check_schema(state, "test.Thing", (1, 2)) == 2
    with pytest.raises(FormatError, match=r"test.Thing version 2; this ccme .* reads test.Thing version 3 only "
                                          r"\(it was written by an older ccme\).*fit the model again with ccme.fit"):
        codec.check_schema(state, "test.Thing", 3)
    with pytest.raises(FormatError, match=r"version 2; .* reads test.Thing version 1 only \(it was written by a "
                                          r"newer ccme\).*ccme.fit.*or load it with the ccme that wrote it"):
        codec.check_schema(state, "test.Thing", 1)
    with pytest.raises(FormatError, match="expected a test.Other state; found 'test.Thing'"):
        codec.check_schema(state, "test.Other", 2)
    with pytest.raises(FormatError, match=r"lacks \['c'\] and has unexpected \['b'\]"):
        codec.check_schema(state, "test.Thing", 2, keys=("a", "c"))
    for bad in ({"a": 1}, [1], {"schema": "test.Thing", "version": "2"}, {"schema": "test.Thing", "version": True}):
        with pytest.raises(FormatError, match="test.Thing"):
            codec.check_schema(bad, "test.Thing", 2)
    with pytest.raises(ValueError, match="cannot be named"):
        codec.make_state("test.Thing", 1, version=3)


def test_int_and_str_keys():
    assert list(codec.str_keys({1: "a", 0: "b", np.int64(-2): "c"}).items()) == [("1", "a"), ("0", "b"), ("-2", "c")]
    assert list(codec.int_keys({"1": "a", "0": "b", "-2": "c"}).items()) == [(1, "a"), (0, "b"), (-2, "c")]
    for bad in ({True: 1}, {1.0: 1}, {(1,): 1}):
        with pytest.raises(FormatError, match="str keys"):
            codec.str_keys(bad)
    for bad in ({"one": 1}, {"1.0": 1}, {"": 1}, [1]):
        with pytest.raises(FormatError, match="the arms"):
            codec.int_keys(bad, what="the arms")


def test_read_object_names_the_file(tmp_path):
    path = codec.write_archive(tmp_path / "thing.ccme", codec.make_state("test.Thing", 1, a=1))

    def from_state(state):
        codec.check_schema(state, "test.Thing", 1)
        return state["missing"]

    with pytest.raises(FormatError, match=r"thing.ccme is damaged or inconsistent \(KeyError: 'missing'\)"):
        codec.read_object(path, from_state)
    with pytest.raises(FormatError, match=r"thing.ccme: the file holds test.Thing version 1.*version 2"):
        codec.read_object(path, lambda state: codec.check_schema(state, "test.Thing", 2))
    assert codec.read_object(path, lambda state: state["a"]) == 1


# ---------------------------------------------------------------------------
# leaf types: to_state -> write -> read -> from_state
# ---------------------------------------------------------------------------
def _round_trip(obj, tmp_path, name="obj.ccme"):
    state = obj.to_state()
    assert (state["schema"], state["version"]) == (type(obj).STATE_SCHEMA, type(obj).STATE_VERSION)
    return type(obj).from_state(codec.read_archive(codec.write_archive(tmp_path / name, state)))


def _assert_same_fields(a, b, fields):
    for name in fields:
        _assert_identical(getattr(a, name), getattr(b, name), name)


FORMULA = "y ~ a | x1 + np.log(x2 + 3) + g + s + C(k) | x3 + x4"


@pytest.fixture(scope="module")
def frame():
    data = ccme.datasets.paper_simulation(200, seed=1)
    rng = np.random.default_rng(1)
    data["g"] = pd.Categorical(rng.choice(["low", "mid", "high"], len(data)), categories=["low", "mid", "high"],
                               ordered=True)
    data["s"] = pd.Series(rng.choice(["u", "v", "w"], len(data)), dtype=object)
    data["k"] = pd.array(rng.integers(0, 3, len(data)), dtype="Int64")
    return data


@pytest.fixture(scope="module")
def design(frame):
    return build_design(parse_formula(FORMULA, frame.columns), frame)


def test_formula_round_trip(tmp_path, frame):
    for text in (FORMULA, "y ~ a | x1 + x2", "y ~ a | x1 | .", "y ~ a | `x1` + I(x2 ** 2)"):
        formula = parse_formula(text, frame.columns)
        back = _round_trip(formula, tmp_path)
        assert back == formula and str(back) == text
        assert str(back._parsed.rhs[1]) == str(formula._parsed.rhs[1])


def test_formula_with_edited_parts_is_refused():
    state = parse_formula("y ~ a | x1 + x2 | x3", ["y", "a", "x1", "x2", "x3"]).to_state()
    with pytest.raises(FormatError, match="does not parse to its stored parts"):
        Formula.from_state(dict(state, conditioning="x1"))
    with pytest.raises(FormatError, match="does not parse"):
        Formula.from_state(dict(state, text="y ~ a"))
    with pytest.raises(FormatError, match=r"ccme.Formula version 7.*reads ccme.Formula version 1 only.*ccme.fit"):
        Formula.from_state(dict(state, version=7))


def test_treatment_round_trip(tmp_path):
    for treatment in (Treatment("a", (0, 1), 0), Treatment("arm", ("placebo", "drug"), "placebo"),
                      Treatment("t", (False, True), False), Treatment("d", (np.int64(1), 2.5), np.int64(1)),
                      Treatment("dose", ("none", "low", "high"), "low"), Treatment("k", (0, 1, 2, 3), 0)):
        back = _round_trip(treatment, tmp_path)
        assert back == treatment
        _assert_same_fields(treatment, back, ("column", "level", "control_level", "reference", "arms"))
        for level in treatment.levels:
            assert type(back.levels[treatment.levels.index(level)]) is type(level)


def test_treatment_reads_version_1():
    """A binary treatment saved before k-level treatments (version 1) loads as the same two levels."""
    state = {"schema": "ccme.Treatment", "version": 1, "column": "a", "level": "drug", "control_level": "placebo"}
    back = Treatment.from_state(state)
    assert back == Treatment("a", ("placebo", "drug"), "placebo")
    assert (back.level, back.control_level, back.arms) == ("drug", "placebo", (1, 0))


def test_design_round_trip(tmp_path, frame, design):
    back = _round_trip(design, tmp_path)
    fields = ("Y", "A", "V", "X", "y_names", "v_names", "x_names", "v_variables", "x_variables", "x_sources",
              "treatment", "n_dropped")
    for name in fields:
        a, b = getattr(design, name), getattr(back, name)
        if isinstance(a, np.ndarray):
            _assert_identical(a, b, name)
        else:
            assert a == b, name
    assert back.formula == design.formula
    pd.testing.assert_frame_equal(back.v_frame, design.v_frame.reset_index(drop=True))
    newdata = frame.sample(40, random_state=2)
    np.testing.assert_array_equal(back.encode_v(newdata), design.encode_v(newdata))
    assert back.encode_v(newdata).tobytes() == design.encode_v(newdata).tobytes()
    pd.testing.assert_frame_equal(back.profiles(), design.profiles())
    np.testing.assert_array_equal(back.columns_of(["x1", "x3"]), design.columns_of(["x1", "x3"]))
    bad = newdata.astype({"s": object})
    bad.iloc[0, bad.columns.get_loc("s")] = "unknown"
    with pytest.raises(ccme.DataError, match="not seen"):  # the rebuilt encoder still refuses unseen levels
        back.encode_v(bad)


def test_design_of_every_column_kind(tmp_path):
    rng = np.random.default_rng(3)
    n = 60
    data = pd.DataFrame({
        "y": rng.normal(size=n), "a": rng.integers(0, 2, n), "x": rng.normal(size=n),
        "flag": rng.random(n) > 0.5, "strs": pd.Series(rng.choice(["m", "n"], n), dtype="str"),
        "f32": rng.normal(size=n).astype(np.float32), "nullable": pd.array(rng.random(n) > 0.5, dtype="boolean"),
        "nf": pd.array(rng.normal(size=n), dtype="Float64"), "cat_num": pd.Categorical(rng.choice([10, 20, 30], n)),
        "cat_obj": pd.Categorical(pd.Series(rng.choice(["r", "s"], n), dtype=object)),
    })
    design = build_design(
        parse_formula("y ~ a | x + flag + strs + f32 + nullable + nf + cat_num + cat_obj", data.columns), data
    )
    back = _round_trip(design, tmp_path)
    pd.testing.assert_frame_equal(back.v_frame, design.v_frame.reset_index(drop=True))
    np.testing.assert_array_equal(back.encode_v(data.iloc[:9]), design.encode_v(data.iloc[:9]))
    # a pandas "string" column (which build_design does not take in V today) still has a stored form
    from ccme.formula import _frame_from_state, _frame_to_state

    text = pd.DataFrame({"t": pd.Series(["p", "q", "p"], dtype="string"), "o": pd.Series(["a", 1, 2.5], dtype=object)})
    state = _frame_to_state(text)
    pd.testing.assert_frame_equal(_frame_from_state(codec.read_archive(codec.write_archive(tmp_path / "f", state))),
                                  text)


def test_design_with_unstorable_column_is_named():
    data = pd.DataFrame({"y": np.arange(8.0), "a": [0, 1] * 4, "x": np.arange(8.0),
                         "when": pd.Series(pd.Categorical(pd.date_range("2020-01-01", periods=8)))})
    design = build_design(parse_formula("y ~ a | x + when", data.columns), data)
    with pytest.raises(FormatError, match="V's column 'when' has dtype datetime64"):
        design.to_state()


def test_design_with_edited_v_is_refused(design):
    state = design.to_state()
    V = state["V"].copy()
    V[0, 0] += 1.0
    with pytest.raises(FormatError, match="does not give the stored V"):
        Design.from_state(dict(state, V=V))
    with pytest.raises(FormatError, match="lacks"):
        Design.from_state({k: v for k, v in state.items() if k != "v_frame"})
    with pytest.raises(FormatError, match=r"ccme.Design version 0.*ccme.fit"):
        Design.from_state(dict(state, version=0))


@pytest.mark.parametrize("term", [
    "I(open('pwned', 'w'))", "np.load(x2)", "exec('1')", "I(x2.__class__)", "I(np)", "I(x2[0])",
    "I(__import__('os').system('touch pwned'))", "I([c for c in x2])", "I(lambda: 1)", "I(np.lib.format)",
])
def test_hostile_formula_in_a_design_is_refused_before_running(design, tmp_path, monkeypatch, term):
    """An edited file (checksums recomputed) cannot make loading run code through the formula."""
    monkeypatch.chdir(tmp_path)
    state = design.to_state()
    formula = dict(state["formula"])
    formula["text"] = formula["text"].replace("np.log(x2 + 3)", term)
    formula["conditioning"] = str(parse_formula(formula["text"], []).conditioning)
    hostile = dict(state, formula=formula)
    path = codec.write_archive(tmp_path / "hostile.ccme", hostile)
    with pytest.raises(FormatError, match="may not evaluate|not an expression"):
        codec.read_object(path, Design.from_state)
    assert not (tmp_path / "pwned").exists()


def test_kernel_round_trip(tmp_path):
    for kernel in (Kernel("gaussian", (np.float64(0.5), np.float64(np.inf)), "median"),
                   Kernel("laplace", (1.0, 2.0)), Kernel("matern52", tuple(np.linspace(0.1, 1, 4)), "user x 2, LOO")):
        back = _round_trip(kernel, tmp_path)
        assert back == kernel
        assert np.asarray(back.bandwidth).tobytes() == np.asarray(kernel.bandwidth, dtype=np.float64).tobytes()
    with pytest.raises(FormatError, match="the names are"):
        Kernel.from_state(dict(Kernel("gaussian", (1.0,)).to_state(), name="exec"))


def test_overlap_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    scores = rng.random(50)
    fields = ("scores", "clip", "n_clipped_low", "n_clipped_high", "ess", "n_arm", "trim", "kept", "n_trimmed_low",
              "n_trimmed_high")
    plain = Overlap(scores, 0.01, 2, 3, {1: 20.5, 0: 18.25}, {1: 26, 0: 24})
    trimmed = Overlap(scores, 0.01, 0, 1, {1: 10.0, 0: 9.5}, {1: 20, 0: 22}, 0.05, scores > 0.05, 3, 4)
    for overlap in (plain, trimmed):
        back = _round_trip(overlap, tmp_path)
        _assert_same_fields(overlap, back, fields)
        assert back.n_clipped == overlap.n_clipped and back.n_trimmed == overlap.n_trimmed


def test_tuning_round_trip(tmp_path):
    lam = np.logspace(-4, 0, 9)
    curves = [
        TuningCurve("lam0", lam, np.linspace(1, 2, 9), "LOO (RKHS)", lam[3], 1, 0.5),
        TuningCurve("lam1", lam, np.r_[np.nan, np.linspace(1, 2, 8)], "LOO (RKHS), both arms", float(lam[2])),
        TuningCurve("epochs_stage2", np.arange(1, 6, dtype=float), np.ones(5), "validation loss", 3.0, 0),
    ]
    fields = ("parameter", "values", "criterion", "criterion_name", "chosen", "arm", "factor")
    for curve in curves:
        _assert_same_fields(curve, _round_trip(curve, tmp_path), fields)
    report = TuningReport(chosen={"lam0": {1: 0.01, 0: np.float64(0.1)}, "x_bandwidth_factor": 0.7, "M": 20,
                                  "epochs_stage2": {1: 4, 0: 5}},
                          curves=curves, seconds=1.25, notes=["a note", "another"])
    back = _round_trip(report, tmp_path)
    _assert_identical(report.chosen, back.chosen, "chosen")
    assert list(back.chosen["lam0"]) == [1, 0]
    assert (back.seconds, back.notes) == (report.seconds, report.notes)
    pd.testing.assert_frame_equal(back.to_frame(), report.to_frame())
    empty = _round_trip(TuningReport(), tmp_path)
    assert (empty.chosen, empty.curves, empty.notes) == ({}, [], [])


def test_fold_round_trip(tmp_path):
    from ccme.crossfit import make_folds

    for fold in make_folds(23, 3, np.random.default_rng(5)):
        _assert_same_fields(fold, _round_trip(fold, tmp_path), ("index", "nuisance", "target"))
    with pytest.raises(FormatError, match="no integer row indices"):
        Fold.from_state(dict(Fold(0, np.arange(3), np.arange(3)).to_state(), target=np.arange(3.0)))


# ---------------------------------------------------------------------------
# the neural fold-arm estimators (weights as arrays)
# ---------------------------------------------------------------------------
def _network(d_in, d_out, dtype_name="float64", seed=0):
    torch = pytest.importorskip("torch")
    from ccme.estimators.training import Standardizer, make_mlp

    generator = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype_name)
    Z = np.random.default_rng(seed).normal(size=(120, d_in))
    Z[0, 0] = 50.0          # far out: the input map clips the first column at its fences, which the state keeps
    standardizer = Standardizer(Z, True, far_out=True)
    return make_mlp(d_in, (5, 4), d_out, generator, dtype, torch.device("cpu")), standardizer, dtype


def test_a_networks_input_fences_round_trip_and_an_older_network_reads_its_inputs_unclipped():
    from ccme.estimators.deep_feature import _network_from_state
    from ccme.estimators.training import network_to_arrays

    net, standardizer, dtype = _network(2, 3)
    # the first column's fence cuts the value at 50; the second's (nothing beyond it) only later inputs beyond it
    assert standardizer.high[0] < 10 and 3 < standardizer.high[1] < 10
    state = network_to_arrays(net, standardizer, dtype, "cpu")
    far = np.array([[1e3, 1e3]])
    back = _network_from_state(state)[1]
    np.testing.assert_array_equal(back(far), standardizer(far))
    np.testing.assert_array_equal(back(far)[0, 0], (standardizer.high[0] - standardizer.mean[0]) / standardizer.sd[0])
    older = _network_from_state({k: v for k, v in state.items() if k not in ("low", "high")})[1]
    np.testing.assert_array_equal(older(far), (far - standardizer.mean) / standardizer.sd)
    with pytest.raises(FormatError, match="fields"):
        _network_from_state({k: v for k, v in state.items() if k != "low"})


def _history(seed):
    from ccme.estimators.training import StageHistory

    rng = np.random.default_rng(seed)
    return StageHistory(train=list(rng.random(4)), validation=[float(v) for v in rng.random(4)] + [math.inf],
                        best_epoch=2, stopped_early=True, seconds=0.5)


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_deep_feature_fold_arm_round_trip(tmp_path, dtype_name):
    from ccme.estimators.deep_feature import DeepFeatureFoldArm, _FeatureMap
    from ccme.estimators.training import network_outputs

    net, standardizer, dtype = _network(3, 6, dtype_name)
    rng = np.random.default_rng(1)
    V = rng.normal(size=(25, 3))
    Psi = network_outputs(net, standardizer, V, dtype, "cpu")
    G = Psi.T @ Psi + 0.1 * np.eye(6)
    fmap = _FeatureMap(net, standardizer, Psi, G, _history(2), dtype, "cpu")
    pseudo = {"a": rng.random(25), "Y1": rng.normal(size=(25, 1)), "U": rng.normal(size=(25, 6)),
              "P0": rng.normal(size=(12, 6)), "Y0": rng.normal(size=(12, 1))}
    arm = DeepFeatureFoldArm(rng.normal(size=(37, 1)), rng.normal(size=(37, 6)), fmap,
                             {1: _history(3), 2: fmap.history}, pseudo)
    back = _round_trip(arm, tmp_path)
    V_eval = rng.normal(size=(9, 3))
    for got, want in zip(back.weights(V_eval), arm.weights(V_eval)):
        _assert_identical(want, got, "weights")
    _assert_identical(arm.coefficients(V_eval), back.coefficients(V_eval), "coefficients")
    for name in ("atoms", "loadings"):
        _assert_identical(getattr(arm, name), getattr(back, name), name)
    _assert_identical(arm.pseudo, back.pseudo, "pseudo")
    assert back.history == arm.history and list(back.history) == [1, 2] and back.jitter == arm.jitter
    assert back.feature_map.history == fmap.history and back.feature_map.dtype == dtype
    _assert_identical(fmap.Psi, back.feature_map.Psi, "Psi")
    _assert_identical(fmap.G, back.feature_map.G, "G")
    for (key, a), (key_b, b) in zip(net.state_dict().items(), back.feature_map.net.state_dict().items()):
        assert key == key_b and a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy())


def test_neural_kernel_fold_arm_round_trip(tmp_path):
    from ccme.estimators.neural_kernel import NeuralKernelFoldArm

    net, standardizer, dtype = _network(2, 7)
    grid = np.linspace(-2, 2, 7)[:, None]
    arm = NeuralKernelFoldArm(grid, net, standardizer, {2: _history(4)}, dtype, "cpu")
    back = _round_trip(arm, tmp_path)
    V_eval = np.random.default_rng(6).normal(size=(11, 2))
    _assert_identical(arm.coefficients(V_eval), back.coefficients(V_eval), "coefficients")
    _assert_identical(arm.atoms, back.atoms, "grid")
    _assert_identical(arm.loadings, back.loadings, "loadings")
    assert back.history == arm.history


def test_neural_kernel_fold_arm_over_outcomes_round_trip(tmp_path):
    """``atoms="outcomes"``: the state keeps the outcomes the grid's weights are spread over, and the atoms and
    loadings recomputed from them come back bit for bit and give the same weights; outcomes that do not fit the
    grid are named."""
    from ccme.estimators.neural_kernel import NeuralKernelFoldArm

    net, standardizer, dtype = _network(2, 7)
    grid = np.linspace(-2, 2, 7)[:, None]
    outcomes = np.random.default_rng(2).normal(size=(40, 1))
    arm = NeuralKernelFoldArm(grid, net, standardizer, {2: _history(4)}, dtype, "cpu", spread_over=outcomes)
    assert len(arm.atoms) == 40
    back = _round_trip(arm, tmp_path)
    for name in ("atoms", "loadings", "spread_over"):
        _assert_identical(getattr(arm, name), getattr(back, name), name)
    V_eval = np.random.default_rng(6).normal(size=(11, 2))
    for got, want in zip(back.weights(V_eval), arm.weights(V_eval)):
        _assert_identical(want, got, "weights")
    _assert_identical(arm.grid, back.grid, "grid")
    state = arm.to_state()
    with pytest.raises(FormatError, match=r"outcomes \(spread_over\) do not fit"):
        NeuralKernelFoldArm.from_state(dict(state, spread_over=np.zeros((5, 2))))


def test_split_neural_kernel_fold_arm_round_trip_and_version_one(tmp_path):
    """A split second stage's correction network comes back bit for bit; a version-1 state (no correction field,
    written before the split) still loads, as one network."""
    from ccme.estimators.neural_kernel import NeuralKernelFoldArm

    net, standardizer, dtype = _network(2, 7)
    correction, _, _ = _network(2, 7, seed=3)
    grid = np.linspace(-2, 2, 7)[:, None]
    arm = NeuralKernelFoldArm(grid, net, standardizer, {2: _history(4), 3: _history(5)}, dtype, "cpu", correction)
    back = _round_trip(arm, tmp_path)
    V_eval = np.random.default_rng(6).normal(size=(11, 2))
    _assert_identical(arm.coefficients(V_eval), back.coefficients(V_eval), "coefficients")
    assert back.history == arm.history and list(back.history) == [2, 3]
    single = NeuralKernelFoldArm(grid, net, standardizer, {2: _history(4)}, dtype, "cpu")
    old = {k: v for k, v in single.to_state().items() if k not in ("correction", "spread_over")}
    loaded = NeuralKernelFoldArm.from_state(dict(old, version=1))
    assert loaded.correction is None
    _assert_identical(single.coefficients(V_eval), loaded.coefficients(V_eval), "coefficients")
    assert not np.array_equal(arm.coefficients(V_eval), single.coefficients(V_eval))


def test_neural_fold_arm_with_bad_network_is_named(tmp_path):
    from ccme.estimators.neural_kernel import NeuralKernelFoldArm

    net, standardizer, dtype = _network(2, 3)
    state = NeuralKernelFoldArm(np.zeros((3, 1)), net, standardizer, {}, dtype, "cpu").to_state()
    layers = dict(state["network"]["layers"])
    layers["0.weight"] = np.zeros((2, 2))  # the wrong shape for the next layer
    with pytest.raises(FormatError, match="network cannot be rebuilt"):
        NeuralKernelFoldArm.from_state(dict(state, network=dict(state["network"], layers=layers)))
    with pytest.raises(FormatError, match="network should have the fields"):
        NeuralKernelFoldArm.from_state(dict(state, network={"layers": layers}))
    with pytest.raises(FormatError, match=r"ccme.NeuralKernelFoldArm version 4.*ccme.fit"):
        NeuralKernelFoldArm.from_state(dict(state, version=4))
