"""The file codec of ccme: a *state* (plain values and NumPy arrays) in one ZIP archive, without pickle.

This module knows no ccme class.  Each ccme type that can be saved turns
itself into a state with ``to_state()`` and back with the classmethod
``from_state(state)``; this module writes a state to a file and reads it
back, checking it.  Because a type writes an explicit state rather than its
attributes, adding an attribute to a class does not change the file format;
changing what a type stores means raising its schema version.

States
------
A state is a tree of

- ``dict`` with ``str`` keys.  ccme keys some mappings by int (the arms 1 and
  0): a type's ``to_state`` writes such keys as ``"1"`` / ``"0"``
  (:func:`str_keys`) and its ``from_state`` turns them back
  (:func:`int_keys`); the codec refuses any other key type, so a key never
  changes type silently on the way through a file.  Key order is kept.
- ``list`` (tuples, sets and other containers are refused: ``to_state``
  converts them, and ``from_state`` restores them, so that what is read is
  exactly what was written);
- ``str``, ``int``, ``float`` (NaN and ±inf included), ``bool`` and ``None``;
- NumPy scalars of bool and numeric dtypes, which come back with their dtype
  (``np.float32(0.1)`` reads back as ``np.float32(0.1)``);
- NumPy arrays of bool and numeric dtypes (``b``, ``i``, ``u``, ``f``,
  ``c``), which come back bit for bit with their dtype, byte order, shape
  and memory order.  Object, string, structured and date-time arrays are
  refused.

Typed states
------------
The state of a ccme type is a dict with ``"schema"`` (the type's name, e.g.
``"ccme.Formula"``) and ``"version"`` (an int raised whenever the type's
state changes meaning), built with :func:`make_state`.  A type's
``from_state`` starts with :func:`check_schema`, which raises
:class:`~ccme.errors.FormatError` naming the version found and the version(s)
this ccme reads, and saying to fit the model again, when they differ.  A
parent nests the states of its children under its own keys (a list of
states for a list of children) and rebuilds them with each child type's
``from_state``, which checks the child's own schema.

Files
-----
One ZIP archive holding

``ccme.json``
    UTF-8 JSON: ``format`` (:data:`FORMAT`), ``format_version``
    (:data:`FORMAT_VERSION`), ``ccme_version`` (of the writer), ``arrays`` (a
    manifest: entry name → dtype, shape, SHA-256 of the entry's bytes and,
    for a packed factor, ``tril``) and ``state``, the tree with its arrays
    and special values replaced by tagged JSON objects (a ``"$"`` key):
    ``{"$": "array", "ref": name}``, ``{"$": "scalar", "dtype": ..., "value":
    ...}`` (a NumPy scalar), ``{"$": "float", "value": "nan" | "inf" |
    "-inf"}`` (JSON has no non-finite numbers; a NaN whose bits are not the
    usual quiet NaN is written ``"nan:0x..."``) and ``{"$": "dict", "items":
    {...}}`` (a dict that itself has a ``"$"`` key).
``ccme.json.sha256``
    The SHA-256 of ``ccme.json``'s bytes, in hex.
``arrays/<name>.npy``
    One array each in NumPy's ``.npy`` format, written and read with
    ``allow_pickle=False``.

Two storage details need nothing from the state writer: arrays with equal
content, dtype, shape and order are stored once (a fold's second-stage data
serve both arms), and a C-ordered square float matrix whose strict upper
triangle is all zero bits (a Cholesky factor) is stored as its packed lower
triangle, which halves the file; both are undone on reading, bit for bit.

Reading refuses, with :class:`~ccme.errors.FormatError` and a message that
names the problem, a file that is not a ccme archive, is truncated, damaged
or altered (every entry is checked against its SHA-256), holds an object
array (which would need pickle), or has another format version: a newer one
(upgrade ccme) or the version-1 files of ccme 0.1 (fit again).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import threading
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from .errors import CcmeError, FormatError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "write_archive",
    "read_archive",
    "read_object",
    "make_state",
    "check_schema",
    "str_keys",
    "int_keys",
]

#: Name of the archive format, in ``ccme.json``.
FORMAT = "ccme.archive"
#: Version of the archive layout; a reader refuses any other version.  ccme 0.1
#: wrote version 1 (format name ``"ccme.result"``: the result's attributes).
FORMAT_VERSION = 2
_LEGACY_FORMATS = ("ccme.result",)
_META = "ccme.json"
_DIGEST = "ccme.json.sha256"
_ARRAY_DIR = "arrays/"
_ARRAY_KINDS = "biufc"
#: The largest ccme.json read; a real state's JSON is a few MB at most (its bulk is in the arrays).
_MAX_JSON_BYTES = 1 << 30
#: Slack for an .npy header over the data bytes (NumPy caps headers it reads at 10 000 bytes).
_NPY_HEADER_SLACK = 1 << 16
_REFIT = ("Saved fits are not converted between versions: fit the model again with ccme.fit "
          "(and save the new result)")


# ---------------------------------------------------------------------------
# typed states
# ---------------------------------------------------------------------------
def make_state(schema: str, version: int, /, **fields) -> dict:
    """The state of a ccme type: ``{"schema": schema, "version": version, **fields}``.

    Parameters
    ----------
    schema : str
        The type's schema name, ``"ccme.<Type>"``.
    version : int
        The version of the type's state; raise it whenever the fields or
        their meaning change.
    **fields
        The type's fields, as state values (see the module docstring).

    Returns
    -------
    dict
    """
    clash = {"schema", "version"} & set(fields)
    if clash:
        raise ValueError(f"a state's fields cannot be named {sorted(clash)}")
    return {"schema": schema, "version": version, **fields}


def check_schema(state, schema: str, versions, *, keys: Iterable[str] | None = None) -> int:
    """Check that ``state`` is a state of ``schema`` in a version this ccme reads; return its version.

    Every ``from_state`` starts with this call, so that a file from another
    version fails with a message rather than a ``KeyError`` deep inside.

    Parameters
    ----------
    state : object
        What was read where a state of ``schema`` belongs.
    schema : str
        The expected schema name, e.g. ``"ccme.Formula"``.
    versions : int or iterable of int
        The version(s) this ccme reads (a type that can still read an older
        state lists it and branches on the returned version).
    keys : iterable of str, optional
        The state's fields besides ``schema`` and ``version``; when given, a
        missing or an unexpected field raises FormatError naming it.

    Returns
    -------
    int
        The state's version.

    Raises
    ------
    ccme.errors.FormatError
        ``state`` is not a dict of ``schema``, its version is not one of
        ``versions`` (the message names both and says to fit again), or its
        fields differ from ``keys``.
    """
    supported = (versions,) if isinstance(versions, int) else tuple(versions)
    if not isinstance(state, dict):
        raise FormatError(f"expected a {schema} state (a JSON object); found {_describe(state)}")
    found_schema = state.get("schema")
    if found_schema != schema:
        found = "no schema" if found_schema is None else repr(found_schema)
        raise FormatError(f"expected a {schema} state; found {found}")
    version = state.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise FormatError(f"the {schema} state has no valid version (found {version!r})")
    if version not in supported:
        readable = " or ".join(str(v) for v in supported)
        newer = version > max(supported)
        raise FormatError(
            f"the file holds {schema} version {version}; this ccme {_ccme_version()} reads {schema} version "
            f"{readable} only ({'it was written by a newer ccme' if newer else 'it was written by an older ccme'}). "
            + _REFIT + (", or load it with the ccme that wrote it" if newer else "")
        )
    if keys is not None:
        expected = set(keys)
        present = set(state) - {"schema", "version"}
        missing, unexpected = sorted(expected - present), sorted(present - expected)
        if missing or unexpected:
            parts = ([f"lacks {missing}"] if missing else []) + ([f"has unexpected {unexpected}"] if unexpected else [])
            raise FormatError(f"the {schema} state (version {version}) {' and '.join(parts)}")
    return version


def str_keys(mapping: Mapping) -> dict:
    """``mapping`` with its int keys written as str (``{1: x, 0: y}`` → ``{"1": x, "0": y}``), order kept.

    States have str keys only (see the module docstring); :func:`int_keys`
    is the inverse.
    """
    out = {}
    for key, value in mapping.items():
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer, str)):
            raise FormatError(f"cannot save a mapping keyed by {type(key).__name__} ({key!r}); states use str keys")
        out[str(int(key)) if not isinstance(key, str) else key] = value
    return out


def int_keys(mapping, *, what: str = "a mapping") -> dict:
    """Inverse of :func:`str_keys`: ``{"1": x, "0": y}`` → ``{1: x, 0: y}``, order kept.

    Raises
    ------
    ccme.errors.FormatError
        ``mapping`` is not a dict, or a key is not a decimal integer.
    """
    if not isinstance(mapping, dict):
        raise FormatError(f"{what} should be a JSON object; found {_describe(mapping)}")
    out = {}
    for key, value in mapping.items():
        text = key[1:] if isinstance(key, str) and key.startswith("-") else key
        if not (isinstance(text, str) and text.isascii() and text.isdigit()):
            raise FormatError(f"{what} has the key {key!r}, which is not an integer")
        out[int(key)] = value
    return out


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------
class _Encoder:
    """Turns a state into a JSON tree, collecting its arrays (each distinct one once)."""

    def __init__(self):
        self.entries: dict[str, tuple[np.ndarray, int | None]] = {}  # name -> (stored array, tril size)
        self._by_content: dict[tuple, str] = {}

    def encode(self, value, where: str):
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, np.generic):
            return self.scalar(value, where)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            value = float(value)
            return value if math.isfinite(value) else {"$": "float", "value": _nonfinite(value, np.dtype(np.float64))}
        if isinstance(value, np.ndarray):
            return self.array(value, where)
        if isinstance(value, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            items = {}
            for key, v in value.items():
                if not isinstance(key, str) or isinstance(key, np.str_):
                    raise FormatError(
                        f"cannot save {where}: its key {key!r} is not a str ({type(key).__name__}); "
                        "states use str keys (ccme.io.str_keys writes int keys as str)"
                    )
                items[str(key)] = self.encode(v, f"{where}[{key!r}]")
            return {"$": "dict", "items": items} if "$" in items else items
        cls = type(value)
        hint = "; a state holds lists, not tuples" if isinstance(value, tuple) else ""
        raise FormatError(f"cannot save {where}: a value of type {cls.__module__}.{cls.__qualname__}{hint}")

    def scalar(self, value: np.generic, where: str):
        dtype = value.dtype
        if dtype.kind not in _ARRAY_KINDS:
            raise FormatError(f"cannot save {where}: a NumPy scalar of dtype {dtype} (only bool and numbers)")
        if dtype.kind == "b":
            stored = bool(value)
        elif dtype.kind in "iu":
            stored = int(value)
        elif dtype.kind == "f" and dtype.itemsize <= 8:
            stored = _float_value(value, dtype)
        elif dtype.kind == "c" and dtype.itemsize <= 16:
            part = np.dtype(f"{dtype.byteorder}f{dtype.itemsize // 2}")
            stored = [_float_value(value.real, part), _float_value(value.imag, part)]
        else:  # long double: no exact JSON number, so it goes in as a 0-d array
            return {"$": "scalar", "dtype": dtype.str, "array": self.array(np.asarray(value), where)}
        return {"$": "scalar", "dtype": dtype.str, "value": stored}

    def array(self, value: np.ndarray, where: str) -> dict:
        if value.dtype.kind not in _ARRAY_KINDS or value.dtype.fields is not None:
            raise FormatError(
                f"cannot save {where}: an array of dtype {value.dtype} (only bool and numeric arrays are stored; "
                "anything else would need pickle)"
            )
        if not (value.flags.c_contiguous or value.flags.f_contiguous):
            value = np.ascontiguousarray(value)
        tril = None
        if _is_lower_triangular(value):
            tril = value.shape[0]
            value = _pack_tril(value)
        flat = (value if value.flags.c_contiguous else value.T).reshape(-1).view(np.uint8)
        key = (value.dtype.str, value.shape, bool(value.flags.c_contiguous), tril, hashlib.sha256(flat).digest())
        name = self._by_content.get(key)
        if name is None:
            name = f"a{len(self.entries)}"
            self._by_content[key] = name
            self.entries[name] = (value, tril)
        return {"$": "array", "ref": name}


def write_archive(path, state: dict, *, compress: bool = False) -> Path:
    """Write ``state`` to ``path`` as a ccme archive (see the module docstring).

    The file is written under a temporary name beside ``path`` and moved into
    place, so an interrupted or failed write never leaves a partial file
    under ``path`` (nor replaces an existing one).

    Parameters
    ----------
    path : str or path-like
    state : dict
        A state: a tree of str-keyed dicts, lists, str, int, float, bool,
        None, NumPy scalars and numeric NumPy arrays.
    compress : bool, default False
        Deflate the archive's entries (slower; fitted weights compress little).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ccme.errors.FormatError
        ``state`` holds something a state may not (the message names where,
        as ``state['design']['V']``); nothing is written then.
    """
    path = Path(path)
    if not isinstance(state, dict):
        raise FormatError(f"cannot save a {type(state).__name__}: a state is a dict")
    encoder = _Encoder()
    tree = encoder.encode(state, "state")
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "xb") as handle, zipfile.ZipFile(handle, "w", compression=method, allowZip64=True) as zf:
            manifest = {}
            for name, (value, tril) in encoder.entries.items():
                entry = _entry(f"{_ARRAY_DIR}{name}.npy", method)
                with zf.open(entry, "w", force_zip64=value.nbytes > (1 << 31) - _NPY_HEADER_SLACK) as raw:
                    sink = _HashingWriter(raw)
                    np.lib.format.write_array(sink, value, allow_pickle=False)
                manifest[name] = {"dtype": value.dtype.str, "shape": list(value.shape),
                                  "sha256": sink.hash.hexdigest()}
                if tril is not None:
                    manifest[name]["tril"] = tril
            meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "ccme_version": _ccme_version(),
                    "arrays": manifest, "state": tree}
            meta_bytes = json.dumps(meta, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            zf.writestr(_entry(_META, method), meta_bytes)
            zf.writestr(_entry(_DIGEST, method), hashlib.sha256(meta_bytes).hexdigest())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _entry(name: str, method: int) -> zipfile.ZipInfo:
    # A fixed time stamp: the same state gives the same bytes (reproducible files, comparable checksums).
    entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    entry.compress_type = method
    entry.external_attr = 0o644 << 16
    return entry


class _HashingWriter:
    """A write-only file that hashes what passes through (the .npy bytes are streamed, never held whole)."""

    def __init__(self, raw):
        self.raw = raw
        self.hash = hashlib.sha256()

    def write(self, data) -> int:
        self.hash.update(data)
        return self.raw.write(data)


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------
def read_archive(path) -> dict:
    """Read the state stored in a ccme archive by :func:`write_archive`.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    dict
        The state, equal to the one written: arrays bit for bit (dtype,
        shape and memory order included), NumPy scalars with their dtype,
        non-finite floats as they were.  Each reference to an array gets its
        own array (two references to one stored array do not share memory).

    Raises
    ------
    ccme.errors.FormatError
        The file is not a ccme archive, is truncated, damaged or altered,
        holds an object array, or has another format version (the message
        names both versions).
    FileNotFoundError, PermissionError
        As ``open`` raises them.
    """
    where = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise FormatError(f"{where} is not a ccme file, or it is truncated ({exc})") from None
    with archive:
        try:
            return _read(archive, where)
        except FormatError:
            raise
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise FormatError(f"{where} is damaged: {exc}") from None
        except RecursionError:
            raise FormatError(f"{where} is damaged: its metadata is nested too deeply") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise FormatError(f"{where} is damaged or inconsistent ({type(exc).__name__}: {exc})") from None


def read_object(path, from_state: Callable[[dict], object]):
    """Read the state in ``path`` and rebuild an object from it with ``from_state``.

    What ``ccme.load`` does: ``read_object(path, CCMEResult.from_state)``.  An
    error that ``from_state`` raises on the state it was given is re-raised as
    :class:`~ccme.errors.FormatError` naming the file, so that a damaged or
    foreign file never surfaces as a ``KeyError``.

    Parameters
    ----------
    path : str or path-like
    from_state : callable
        A type's ``from_state`` classmethod.

    Returns
    -------
    object
        What ``from_state`` returns.

    Raises
    ------
    ccme.errors.FormatError
        As :func:`read_archive`, or the state does not make an object
        (another schema version, a missing field, an inconsistency).
    """
    state = read_archive(path)
    where = str(path)
    try:
        return from_state(state)
    except FormatError as exc:
        raise FormatError(f"{where}: {exc}") from None
    except CcmeError as exc:
        raise FormatError(f"{where} cannot be loaded: {exc}") from exc
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        # Chained, not hidden: if this is a bug in a from_state rather than a bad file, the cause shows.
        raise FormatError(f"{where} is damaged or inconsistent ({type(exc).__name__}: {exc})") from exc


def _read(archive: zipfile.ZipFile, where: str) -> dict:
    try:
        info = archive.getinfo(_META)
    except KeyError:
        raise FormatError(f"{where} is not a ccme file (it has no {_META})") from None
    if info.file_size > _MAX_JSON_BYTES:
        raise FormatError(f"{where} is damaged: its {_META} claims {info.file_size} bytes")
    meta_bytes = archive.read(_META)
    try:
        digest = archive.read(_DIGEST).decode("ascii").strip()
    except KeyError:
        raise FormatError(f"{where} is damaged: it has no {_DIGEST}") from None
    except UnicodeDecodeError:
        raise FormatError(f"{where} is damaged: {_DIGEST} is not a hex digest") from None
    try:
        meta = json.loads(meta_bytes.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"{where} is damaged: its metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise FormatError(f"{where} is not a ccme file (its {_META} is not a JSON object)")
    _check_format(meta, where)
    # The version is checked before the checksum: a later format may hash differently.
    if hashlib.sha256(meta_bytes).hexdigest() != digest:
        raise FormatError(f"{where} has been altered or damaged: the checksum of {_META} does not match")
    manifest = meta.get("arrays")
    if not isinstance(manifest, dict) or "state" not in meta:
        raise FormatError(f"{where} is damaged: {_META} lacks its array manifest or its state")
    decoder = _Decoder(archive, manifest, where)
    state = decoder.decode(meta["state"])
    if not isinstance(state, dict):
        raise FormatError(f"{where} is damaged: its state is {_describe(state)}, not a JSON object")
    return state


def _check_format(meta: dict, where: str) -> None:
    name, version = meta.get("format"), meta.get("format_version")
    writer = meta.get("ccme_version")
    by = f" (by ccme {writer})" if isinstance(writer, str) else ""
    if name in _LEGACY_FORMATS:
        raise FormatError(
            f"{where} was written in ccme's save format version {version!r}{by}; this ccme {_ccme_version()} reads "
            f"format version {FORMAT_VERSION} only. {_REFIT}"
        )
    if name != FORMAT:
        raise FormatError(f"{where} is not a ccme file (format {name!r})")
    if not isinstance(version, int) or isinstance(version, bool):
        raise FormatError(f"{where} is damaged: format version {version!r}")
    if version > FORMAT_VERSION:
        raise FormatError(
            f"{where} was written in ccme's save format version {version}{by}; this ccme {_ccme_version()} reads "
            f"format version {FORMAT_VERSION}: upgrade ccme to load it"
        )
    if version != FORMAT_VERSION:
        raise FormatError(
            f"{where} was written in ccme's save format version {version}{by}; this ccme {_ccme_version()} reads "
            f"format version {FORMAT_VERSION} only. {_REFIT}"
        )


class _Decoder:
    """Turns the JSON tree back into a state, reading (and checking) each array entry on first use."""

    def __init__(self, archive: zipfile.ZipFile, manifest: dict, where: str):
        self.archive = archive
        self.manifest = manifest
        self.where = where
        self.read: dict[str, np.ndarray] = {}

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            raise FormatError(f"{self.where} is damaged: unexpected JSON value {_describe(node)}")
        if "$" not in node:
            return {key: self.decode(value) for key, value in node.items()}
        tag = node["$"]
        if tag == "array":
            self._fields(node, {"ref"})
            return self.array(node["ref"])
        if tag == "scalar":
            return self.scalar(node)
        if tag == "float":
            self._fields(node, {"value"})
            return float(_parse_float(node["value"], np.dtype(np.float64), self.where))
        if tag == "dict":
            self._fields(node, {"items"})
            if not isinstance(node["items"], dict):
                raise FormatError(f"{self.where} is damaged: a tagged dict without items")
            return {key: self.decode(value) for key, value in node["items"].items()}
        raise FormatError(f"{self.where} is damaged: unknown tag {str(tag)[:40]!r}")

    def _fields(self, node: dict, fields: set) -> None:
        if set(node) != fields | {"$"}:
            raise FormatError(f"{self.where} is damaged: a {node['$']!r} node with fields {sorted(node)}")

    def scalar(self, node: dict):
        dtype = _safe_dtype(node.get("dtype"), self.where)
        if "array" in node:
            self._fields(node, {"dtype", "array"})
            value = self.decode(node["array"])
            if not isinstance(value, np.ndarray) or value.shape != () or value.dtype != dtype:
                raise FormatError(f"{self.where} is damaged: a scalar of dtype {dtype} is stored as {_describe(value)}")
            return value[()]
        self._fields(node, {"dtype", "value"})
        value = node["value"]
        if dtype.kind == "b" and isinstance(value, bool):
            return dtype.type(value)
        if dtype.kind in "iu" and isinstance(value, int) and not isinstance(value, bool):
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise FormatError(f"{self.where} is damaged: {value} does not fit dtype {dtype}")
            return dtype.type(value)
        if dtype.kind == "f" and dtype.itemsize <= 8:
            return _parse_float(value, dtype, self.where)
        if dtype.kind == "c" and dtype.itemsize <= 16 and isinstance(value, list) and len(value) == 2:
            part = np.dtype(f"{dtype.byteorder}f{dtype.itemsize // 2}")
            out = np.zeros((), dtype=dtype)
            out.real, out.imag = _parse_float(value[0], part, self.where), _parse_float(value[1], part, self.where)
            return out[()]
        raise FormatError(f"{self.where} is damaged: {_describe(value)} is no scalar of dtype {dtype}")

    def array(self, name) -> np.ndarray:
        if not isinstance(name, str) or name not in self.manifest:
            raise FormatError(f"{self.where} is damaged: it refers to an array {str(name)[:40]!r} it does not hold")
        if name in self.read:  # a second reference gets its own copy: states do not alias
            return self.read[name].copy(order="K")
        info = self.manifest[name]
        if not isinstance(info, dict):
            raise FormatError(f"{self.where} is damaged: the manifest entry of {name!r} is {_describe(info)}")
        entry = f"{_ARRAY_DIR}{name}.npy"
        dtype = _safe_dtype(info.get("dtype"), self.where, entry)
        shape = info.get("shape")
        if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                for s in shape)):
            raise FormatError(f"{self.where} is damaged: the manifest gives {entry} the shape {shape!r}")
        try:
            zinfo = self.archive.getinfo(entry)
        except KeyError:
            raise FormatError(f"{self.where} is damaged: the array entry {entry} is missing") from None
        nbytes = math.prod(shape) * dtype.itemsize
        if not nbytes <= zinfo.file_size <= nbytes + _NPY_HEADER_SLACK:
            raise FormatError(f"{self.where} is damaged: {entry} holds {zinfo.file_size} bytes, but the manifest "
                              f"describes {nbytes} bytes of data")
        with self.archive.open(zinfo) as raw:
            source = _HashingReader(raw)
            try:
                value = np.lib.format.read_array(source, allow_pickle=False)
            except ValueError as exc:
                if "pickle" in str(exc).lower() or "object" in str(exc).lower():
                    raise FormatError(f"{self.where}: {entry} cannot be read without pickle ({exc})") from None
                raise FormatError(f"{self.where} is damaged: {entry} is not a valid .npy array ({exc})") from None
            source.read()  # the rest: hashed too, and reaching the end makes zipfile check the entry's CRC
        if source.hash.hexdigest() != info.get("sha256"):
            raise FormatError(f"{self.where} has been altered or damaged: the checksum of {entry} does not match")
        if value.dtype.str != dtype.str or list(value.shape) != shape:
            raise FormatError(f"{self.where} is inconsistent: {entry} has dtype {value.dtype.str} and shape "
                              f"{value.shape}, the manifest says {dtype.str} and {tuple(shape)}")
        tril = info.get("tril")
        if tril is not None:
            if not isinstance(tril, int) or isinstance(tril, bool) or tril < 2:
                raise FormatError(f"{self.where} is damaged: {entry} has a bad packing size {tril!r}")
            value = _unpack_tril(value, tril, f"{self.where}: {entry}")
        self.read[name] = value
        return value


class _HashingReader:
    """A read-only file that hashes what is read through it (arrays are read in chunks, not as one bytes)."""

    def __init__(self, raw):
        self.raw = raw
        self.hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        return data


def _safe_dtype(text, where: str, entry: str = "a scalar") -> np.dtype:
    """The dtype named by ``text`` if it is a bool or numeric dtype; never an object dtype."""
    if not isinstance(text, str) or len(text) > 8:
        raise FormatError(f"{where} is damaged: {entry} has the dtype {str(text)[:40]!r}")
    try:
        dtype = np.dtype(text)
    except (TypeError, ValueError, SyntaxError):
        raise FormatError(f"{where} is damaged: {entry} has the dtype {text!r}") from None
    if dtype.hasobject:
        raise FormatError(f"{where}: {entry} holds Python objects (dtype {text}), which cannot be read without "
                          "pickle; ccme never writes them, so the file has been tampered with")
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise FormatError(f"{where} is damaged: {entry} has the dtype {text!r}, which ccme does not store")
    return dtype


# ---------------------------------------------------------------------------
# floats, triangles, helpers
# ---------------------------------------------------------------------------
def _float_value(value, dtype: np.dtype):
    """A float of ``dtype`` as a JSON number (exact: every float of at most 64 bits is a double) or a tag string."""
    as_double = float(value)
    return as_double if math.isfinite(as_double) else _nonfinite(value, dtype)


def _nonfinite(value, dtype: np.dtype) -> str:
    as_double = float(value)
    if math.isinf(as_double):
        return "inf" if as_double > 0 else "-inf"
    bits = _bits(value, dtype)
    return "nan" if bits == _bits(np.nan, dtype) else f"nan:{bits:#0{2 + 2 * dtype.itemsize}x}"


def _bits(value, dtype: np.dtype) -> int:
    if dtype == np.float64 and isinstance(value, float):
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    return int(np.asarray(value, dtype=dtype).astype(dtype.newbyteorder("=")).view(f"u{dtype.itemsize}"))


def _parse_float(value, dtype: np.dtype, where: str):
    """Inverse of :func:`_float_value`: a scalar of ``dtype`` (a Python float for float64 tags read as floats)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dtype.type(value)
    if value in ("inf", "-inf", "nan"):
        return dtype.type(float(value))
    if isinstance(value, str) and value.startswith("nan:0x"):
        try:
            bits = int(value[4:], 16)
            out = np.array(bits, dtype=f"u{dtype.itemsize}").view(dtype.newbyteorder("="))
        except (ValueError, OverflowError):
            raise FormatError(f"{where} is damaged: bad float {value[:40]!r}") from None
        if not np.isnan(out):
            raise FormatError(f"{where} is damaged: {value[:40]!r} is not a NaN")
        return out.astype(dtype)[()]
    raise FormatError(f"{where} is damaged: bad float {str(value)[:40]!r}")


def _refuse_constant(name: str):
    # ccme writes non-finite floats as tagged strings, never as JSON's NaN extensions.
    raise ValueError(f"the non-standard JSON constant {name}")


def _is_lower_triangular(value: np.ndarray) -> bool:
    """A C-ordered square float matrix whose strict upper triangle is all zero *bits* (so -0.0 is kept)."""
    if (value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] < 2 or value.dtype.kind != "f"
            or value.dtype.itemsize > 8 or not value.flags.c_contiguous):
        return False
    bits = value.view(f"u{value.dtype.itemsize}")
    # Row by row: no temporary the size of the matrix (a factor can be most of memory).
    return all(not bits[i, i + 1:].any() for i in range(value.shape[0] - 1))


def _pack_tril(value: np.ndarray) -> np.ndarray:
    n = value.shape[0]
    return np.concatenate([value[i, : i + 1] for i in range(n)])


def _unpack_tril(packed: np.ndarray, n: int, where: str) -> np.ndarray:
    if packed.shape != (n * (n + 1) // 2,):
        raise FormatError(f"{where} is damaged: a packed triangle of size {n} needs {n * (n + 1) // 2} values, "
                          f"not {packed.size}")
    out = np.zeros((n, n), dtype=packed.dtype)
    start = 0
    for i in range(n):
        out[i, : i + 1] = packed[start:start + i + 1]
        start += i + 1
    return out


def _describe(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _ccme_version() -> str:
    try:
        from . import __version__
    except ImportError:  # while ccme itself is being imported
        return "(unknown version)"
    return __version__
