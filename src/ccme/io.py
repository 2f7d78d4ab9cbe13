"""Safe serialisation of fitted results: ``res.save(path)`` and ``ccme.load(path)``.

A saved result is one ZIP archive that loading cannot turn into code
execution: no pickle anywhere.

``ccme.json``
    The metadata, JSON: ``format`` ("ccme.result"), ``format_version``, the
    ``ccme_version`` that wrote it, a manifest of the arrays (entry, dtype,
    shape, SHA-256 of the entry's bytes) and ``result``, the result's
    attributes as a tree of JSON values and tagged objects (see below).
``ccme.json.sha256``
    The SHA-256 of ``ccme.json``'s bytes.
``arrays/<name>.npy``
    One array each in NumPy's ``.npy`` format, written and read with
    ``allow_pickle=False`` (object arrays are refused).  Arrays with equal
    content are stored once (a fold's second-stage data serve both arms); a
    lower-triangular square matrix (a Cholesky factor) is stored as its packed
    lower triangle, which halves the file.

Tagged objects are JSON objects with a ``"$"`` key: ``dict`` (any keys, as
pairs), ``tuple``, ``frozenset``, ``float`` (non-finite values), ``array`` (a
name in the manifest), ``frame`` (a DataFrame, column by column),
``dataclass`` (a dataclass defined in ccme, rebuilt from its fields), and
``object`` (a ccme class with ``to_arrays()`` / ``from_arrays(state)``, such
as the neural fold-and-arm estimators, whose networks are stored as their
weight arrays and rebuilt from the layer shapes).  A class is looked up only
in ccme's own modules and must be a dataclass or provide ``from_arrays``, so
the file can pick among ccme's data classes but cannot name a function.

What loading re-creates rather than reads: the estimator object (from the
method's name) and the formulaic model spec that encodes ``newdata`` into V.
The spec is rebuilt by evaluating the formula's conditioning part on the
stored training V columns, after every Python expression in that part has
been checked against a whitelist (column names, formulaic's transforms, a
list of numpy functions, arithmetic), and the rebuilt encoding must reproduce
the stored V bit for bit.  A formula that names anything else (which a
tampered file could) is refused before any evaluation.

Loading verifies every checksum and refuses, with
:class:`ccme.errors.FormatError`, a file that is not a ccme result, is
truncated or altered, or was written by a newer format version (the message
names both versions).  Attributes whose names start with ``_`` are caches and
are not saved (except the embeddings); a public attribute that cannot be
stored raises FormatError at save time, naming it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import io
import json
import math
import os
import re
import threading
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import CcmeError, FormatError

__all__ = ["save", "load", "FORMAT", "FORMAT_VERSION"]

FORMAT = "ccme.result"
#: Version of the file layout; a reader refuses files with a larger number.
FORMAT_VERSION = 1
_META = "ccme.json"
_DIGEST = "ccme.json.sha256"
_ARRAY_DIR = "arrays/"
_PRIVATE_SAVED = ("_embeddings",)
_DERIVED = ("formula", "estimator")  # rebuilt from design.formula and method


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------
class _Writer:
    """Encodes values into JSON-able trees, collecting arrays (deduplicated by content)."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.manifest: dict[str, dict] = {}
        self._by_content: dict[tuple, str] = {}

    def array(self, value: np.ndarray, where: str) -> dict:
        if value.dtype.hasobject:
            raise FormatError(f"cannot save {where}: an array of Python objects (dtype {value.dtype})")
        value = np.ascontiguousarray(value)
        tag = {"$": "array"}
        if _is_lower_triangular(value):
            tag["tril"] = int(value.shape[0])
            value = _pack_tril(value)
        raw = _npy_bytes(value)
        digest = hashlib.sha256(raw).hexdigest()
        key = (digest, len(raw))
        name = self._by_content.get(key)
        if name is None:
            name = f"a{len(self.arrays)}"
            self._by_content[key] = name
            self.arrays[name] = raw
            self.manifest[name] = {"dtype": value.dtype.str, "shape": list(value.shape), "sha256": digest}
        tag["name"] = name
        return tag

    def encode(self, value, where: str):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            return value if math.isfinite(value) else {"$": "float", "value": repr(value)}
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.ndarray):
            return self.array(value, where)
        if isinstance(value, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"$": "tuple", "items": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, frozenset):
            return {"$": "frozenset", "items": [self.encode(v, f"{where}{{}}") for v in sorted(value, key=repr)]}
        if isinstance(value, dict):
            return {"$": "dict", "items": [[self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")]
                                           for k, v in value.items()]}
        if isinstance(value, pd.DataFrame):
            return self.frame(value, where)
        cls = type(value)
        if hasattr(value, "to_arrays") and hasattr(cls, "from_arrays"):
            return {"$": "object", "type": _type_name(cls, where),
                    "state": self.encode(value.to_arrays(), f"{where}.state")}
        if dataclasses.is_dataclass(value):
            fields = {f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                      for f in dataclasses.fields(value) if not f.name.startswith("_")}
            return {"$": "dataclass", "type": _type_name(cls, where), "fields": fields}
        raise FormatError(f"cannot save {where}: a value of type {cls.__module__}.{cls.__qualname__}")

    def frame(self, frame: pd.DataFrame, where: str) -> dict:
        columns = []
        for name in frame.columns:
            column = frame[name]
            entry = {"name": self.encode(name, f"{where} column name")}
            at = f"{where}[{name!r}]"
            if isinstance(column.dtype, pd.CategoricalDtype):
                entry.update(kind="categorical", codes=self.array(column.cat.codes.to_numpy(), at),
                             categories=self.encode(list(column.cat.categories), at),
                             ordered=bool(column.cat.ordered))
            elif isinstance(column.dtype, np.dtype) and column.dtype.kind in "biufcmM":
                entry.update(kind="array", values=self.array(column.to_numpy(), at))
            else:
                entry.update(kind="values", dtype=str(column.dtype), values=self.encode(column.tolist(), at))
            columns.append(entry)
        index = frame.index
        if isinstance(index, pd.RangeIndex):
            stored = {"range": [index.start, index.stop, index.step]}
        else:
            stored = {"values": self.encode(index.tolist(), f"{where}.index")}
        return {"$": "frame", "columns": columns, "index": stored}


def save(result, path, *, compress: bool = False) -> Path:
    """Write ``result`` (a :class:`ccme.CCMEResult`) to ``path``; see the module docstring.

    Every arm's fold estimators are built first (the neural ones are trained
    on first use), so the file holds the complete fit.  The file is written
    to a temporary name and moved into place, so an interrupted save never
    leaves a truncated file under ``path``.

    Parameters
    ----------
    result : CCMEResult
    path : str or path-like
    compress : bool, default False
        Deflate the archive's entries (slower; fitted weights compress little).

    Returns
    -------
    pathlib.Path
    """
    from . import __version__

    path = Path(path)
    writer = _Writer()
    tree = {}
    for key, value in vars(result).items():
        if key in _DERIVED or (key.startswith("_") and key not in _PRIVATE_SAVED):
            continue
        if key == "_embeddings":
            tree[key] = {str(arm): {"y_kernel": writer.encode(emb.y_kernel, f"embedding {arm} kernel"),
                                    "n_threads": int(emb.n_threads),
                                    "parts": writer.encode(list(emb.parts), f"arm {arm}'s estimators")}
                         for arm, emb in value.items()}
        else:
            tree[key] = writer.encode(value, key)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "ccme_version": __version__,
            "arrays": writer.manifest, "result": tree}
    meta_bytes = json.dumps(meta, allow_nan=False, separators=(",", ":")).encode("utf-8")
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "xb") as handle, zipfile.ZipFile(handle, "w", compression=method, allowZip64=True) as zf:
            zf.writestr(_META, meta_bytes)
            zf.writestr(_DIGEST, hashlib.sha256(meta_bytes).hexdigest())
            for name, raw in writer.arrays.items():
                zf.writestr(f"{_ARRAY_DIR}{name}.npy", raw)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------
class _Reader:
    def __init__(self, arrays: dict, where: str):
        self.arrays = arrays
        self.where = where

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict) or "$" not in node:
            raise FormatError(f"{self.where}: unexpected JSON value {str(node)[:80]!r}")
        tag = node["$"]
        if tag == "array":
            value = self.arrays[node["name"]]
            return _unpack_tril(value, int(node["tril"])) if "tril" in node else value.copy()
        if tag == "tuple":
            return tuple(self.decode(v) for v in node["items"])
        if tag == "frozenset":
            return frozenset(self.decode(v) for v in node["items"])
        if tag == "dict":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in node["items"]}
        if tag == "float":
            if node["value"] not in ("nan", "inf", "-inf"):
                raise FormatError(f"{self.where}: bad float {node['value']!r}")
            return float(node["value"])
        if tag == "frame":
            return self.frame(node)
        if tag == "dataclass":
            cls = _resolve_type(node["type"], self.where, dataclass=True)
            values = {name: self.decode(v) for name, v in node["fields"].items()}
            known = {f.name: f for f in dataclasses.fields(cls)}
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise FormatError(f"{self.where}: {node['type']} has no field(s) {unknown}")
            obj = cls(**{k: v for k, v in values.items() if known[k].init})
            for k, v in values.items():
                if not known[k].init:
                    object.__setattr__(obj, k, v)
            return obj
        if tag == "object":
            cls = _resolve_type(node["type"], self.where, dataclass=False)
            return cls.from_arrays(self.decode(node["state"]))
        raise FormatError(f"{self.where}: unknown tag {tag!r}")

    def frame(self, node) -> pd.DataFrame:
        data = {}
        for entry in node["columns"]:
            name, kind = self.decode(entry["name"]), entry["kind"]
            if kind == "categorical":
                data[name] = pd.Categorical.from_codes(self.decode(entry["codes"]),
                                                       categories=self.decode(entry["categories"]),
                                                       ordered=bool(entry["ordered"]))
            elif kind == "array":
                data[name] = self.decode(entry["values"])
            elif kind == "values":
                values = pd.Series(self.decode(entry["values"]), dtype=object)
                data[name] = values.astype(_safe_dtype(entry["dtype"], self.where))
            else:
                raise FormatError(f"{self.where}: unknown column kind {kind!r}")
        stored = node["index"]
        index = pd.RangeIndex(*stored["range"]) if "range" in stored else pd.Index(self.decode(stored["values"]))
        frame = pd.DataFrame(data, index=index)
        return frame[[self.decode(e["name"]) for e in node["columns"]]]


def load(path):
    """Read a result written by :meth:`ccme.CCMEResult.save`.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    CCMEResult
        Gives the same densities, CDFs, moments and summaries, bit for bit,
        as the result that was saved.

    Raises
    ------
    ccme.errors.FormatError
        The file is not a ccme result, is truncated or altered, or comes from
        a newer format version.
    """
    from . import __version__

    path = Path(path)
    where = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FormatError(f"{where} is not a ccme result file, or it is truncated ({exc})") from None
    with archive:
        try:
            meta_bytes = archive.read(_META)
            digest = archive.read(_DIGEST).decode("ascii").strip()
        except KeyError:
            raise FormatError(f"{where} is not a ccme result file (it has no {_META})") from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, UnicodeDecodeError) as exc:
            raise FormatError(f"{where} is damaged: {exc}") from None
        try:
            meta = json.loads(meta_bytes)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FormatError(f"{where} is damaged: its metadata is not valid JSON ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise FormatError(f"{where} is not a ccme result file (format {meta.get('format') if isinstance(meta, dict) else None!r})")
        version = meta.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise FormatError(f"{where} is damaged: format version {version!r}")
        if version > FORMAT_VERSION:
            raise FormatError(
                f"{where} was written in ccme save format version {version} (by ccme {meta.get('ccme_version')}); "
                f"this ccme {__version__} reads format version {FORMAT_VERSION} and older: upgrade ccme to load it"
            )
        if hashlib.sha256(meta_bytes).hexdigest() != digest:
            raise FormatError(f"{where} has been altered or damaged: the checksum of {_META} does not match")
        try:
            arrays = _read_arrays(archive, meta["arrays"], where)
            return _rebuild(meta["result"], _Reader(arrays, where), where)
        except CcmeError as exc:
            if isinstance(exc, FormatError):
                raise
            raise FormatError(f"{where} cannot be loaded: {exc}") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
            raise FormatError(f"{where} is damaged or inconsistent ({type(exc).__name__}: {exc})") from None


def _read_arrays(archive: zipfile.ZipFile, manifest: dict, where: str) -> dict:
    arrays = {}
    for name, info in manifest.items():
        entry = f"{_ARRAY_DIR}{name}.npy"
        try:
            raw = archive.read(entry)
        except KeyError:
            raise FormatError(f"{where} is damaged: the array entry {entry} is missing") from None
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise FormatError(f"{where} is damaged: {entry}: {exc}") from None
        if hashlib.sha256(raw).hexdigest() != info["sha256"]:
            raise FormatError(f"{where} has been altered or damaged: the checksum of {entry} does not match")
        try:
            value = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
        except ValueError as exc:
            raise FormatError(f"{where}: {entry} cannot be read without pickle ({exc})") from None
        if value.dtype.str != info["dtype"] or list(value.shape) != list(info["shape"]):
            raise FormatError(f"{where} is inconsistent: {entry} has dtype {value.dtype.str} and shape "
                              f"{value.shape}, the manifest says {info['dtype']} and {tuple(info['shape'])}")
        arrays[name] = value
    return arrays


def _rebuild(tree: dict, reader: _Reader, where: str):
    from .embedding import ArmEmbedding
    from .estimators import get_estimator
    from .result import CCMEResult

    state = {}
    for key, node in tree.items():
        if key == "_embeddings":
            state[key] = {int(arm): ArmEmbedding(reader.decode(entry["parts"]), reader.decode(entry["y_kernel"]),
                                                 int(entry["n_threads"]))
                          for arm, entry in node.items()}
        else:
            state[key] = reader.decode(node)
    state["design"] = _restore_design(state["design"], where)
    state["formula"] = state["design"].formula
    state["estimator"] = get_estimator(state["method"])
    result = CCMEResult.__new__(CCMEResult)
    result.__dict__.update(state)
    return result


# ---------------------------------------------------------------------------
# the design: formula and V's encoder
# ---------------------------------------------------------------------------
#: numpy functions a saved formula may call (formulaic's own transforms are allowed too).
_NUMPY_FUNCTIONS = frozenset({
    "abs", "absolute", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "cbrt", "ceil", "clip",
    "cos", "cosh", "exp", "exp2", "expm1", "fabs", "floor", "log", "log10", "log1p", "log2", "maximum", "minimum",
    "power", "round", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "where",
})
_CONTRASTS = frozenset({"treatment", "sum", "helmert", "diff", "poly", "custom"})
_SAFE_NODES = (
    ast.Expression, ast.Call, ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare,
    ast.BoolOp, ast.List, ast.Tuple, ast.keyword, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)


def _check_expression(expr: str, columns, where: str) -> None:
    """Refuse a formula factor that is anything but columns, formulaic transforms, numpy math and arithmetic."""
    from formulaic.transforms import TRANSFORMS

    quoted = {}

    def _placeholder(match):
        quoted[f"_ccme_quoted_{len(quoted)}"] = match.group(0)
        return f"_ccme_quoted_{len(quoted) - 1}"

    text = re.sub(r"`[^`]*`", _placeholder, expr)
    allowed_names = set(columns) | set(quoted) | (set(TRANSFORMS) - {"np"})
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise FormatError(f"{where}: the formula term {expr!r} is not an expression") from None
    for node in ast.walk(tree):
        ok = isinstance(node, _SAFE_NODES)
        if isinstance(node, ast.Name):
            ok = node.id in allowed_names or node.id in ("np", "numpy")
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            ok = (base in ("np", "numpy") and node.attr in _NUMPY_FUNCTIONS) or (base == "contr" and node.attr in _CONTRASTS)
        elif isinstance(node, ast.Constant):
            ok = isinstance(node.value, (int, float, str, bool, type(None)))
        if not ok:
            raise FormatError(
                f"{where}: the formula term {expr!r} uses {ast.dump(node)[:60]}, which a saved result may not "
                "evaluate (only columns, formulaic's transforms, numpy math functions and arithmetic); "
                "the file may have been tampered with"
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("np", "numpy"):
            parents = [p for p in ast.walk(tree) if isinstance(p, ast.Attribute) and p.value is node]
            if not parents:
                raise FormatError(f"{where}: the formula term {expr!r} uses numpy itself, not one of its functions")


def _restore_design(design, where: str):
    """Re-parse the formula and rebuild the V encoder on the stored V columns; check it reproduces V."""
    import formulaic

    from .formula import parse_formula

    saved = design.formula
    columns = list(dict.fromkeys([*design.x_variables, *design.v_variables, design.treatment.column]))
    formula = parse_formula(saved.text, columns)
    if (formula.treatment, formula.conditioning) != (saved.treatment, saved.conditioning):
        raise FormatError(f"{where} is inconsistent: the formula {saved.text!r} does not parse to the saved parts")
    conditioning = formula._parsed.rhs[1]
    for term in conditioning:
        for factor in term.factors:
            if str(factor.eval_method.value) == "python":
                _check_expression(str(factor.expr), design.v_variables, where)
    frame = design.v_frame
    if frame is None or list(frame.columns) != list(design.v_variables):
        raise FormatError(f"{where} is inconsistent: the stored V columns are not {list(design.v_variables)}")
    try:
        matrix = formulaic.model_matrix(conditioning, frame, na_action="raise", context={})
    except Exception as exc:  # formulaic raises many types; all mean "cannot rebuild"
        raise FormatError(f"{where}: cannot rebuild the encoder of V from {saved.conditioning!r}: {exc}") from None
    V = np.asarray(matrix, dtype=np.float64)
    V = V[:, None] if V.ndim == 1 else V
    if V.shape != design.V.shape or not np.array_equal(V, design.V, equal_nan=True):
        raise FormatError(
            f"{where} is inconsistent: re-encoding the stored V columns with {saved.conditioning!r} does not give "
            "the stored V (the file was altered, or the formula's transforms depend on rows dropped at fit time)"
        )
    return dataclasses.replace(design, formula=formula, _v_spec=matrix.model_spec, _x3_spec=None)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
_TYPE_NAME = re.compile(r"ccme(\.[A-Za-z][A-Za-z0-9_]*)*")


def _type_name(cls, where: str) -> str:
    module = cls.__module__
    if not (module == "ccme" or module.startswith("ccme.")):
        raise FormatError(f"cannot save {where}: {module}.{cls.__qualname__} is not a ccme class")
    return f"{module}:{cls.__qualname__}"


def _resolve_type(name: str, where: str, *, dataclass: bool):
    module_name, _, qualname = str(name).partition(":")
    if not _TYPE_NAME.fullmatch(module_name) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", qualname):
        raise FormatError(f"{where}: {name!r} is not a ccme class")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise FormatError(f"{where}: this ccme has no module {module_name!r} (the file needs a newer ccme)") from None
    cls = getattr(module, qualname, None)
    ok = isinstance(cls, type) and (
        dataclasses.is_dataclass(cls) if dataclass else callable(getattr(cls, "from_arrays", None))
    )
    if not ok or cls.__module__ != module_name:
        raise FormatError(f"{where}: {name!r} is not a ccme class that a saved result may hold")
    return cls


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


#: pandas dtypes a stored column may be cast to (anything else is read as objects).
_DTYPES = frozenset({"object", "string", "boolean", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32",
                     "UInt64", "Float32", "Float64", "str"})


def _safe_dtype(name: str, where: str):
    if name not in _DTYPES:
        raise FormatError(f"{where}: a stored column has dtype {name!r}, which ccme does not restore")
    return name


def _npy_bytes(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def _is_lower_triangular(value: np.ndarray) -> bool:
    if value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] < 2 or value.dtype.kind != "f":
        return False
    n = value.shape[0]
    return all(not value[i, i + 1:].any() for i in range(n - 1))


def _pack_tril(value: np.ndarray) -> np.ndarray:
    n = value.shape[0]
    return np.concatenate([value[i, : i + 1] for i in range(n)])


def _unpack_tril(packed: np.ndarray, n: int) -> np.ndarray:
    if packed.shape != (n * (n + 1) // 2,):
        raise FormatError(f"a packed triangular array has {packed.size} values; {n} × {n} needs {n * (n + 1) // 2}")
    out = np.zeros((n, n), dtype=packed.dtype)
    start = 0
    for i in range(n):
        out[i, : i + 1] = packed[start:start + i + 1]
        start += i + 1
    return out
