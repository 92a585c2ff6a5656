"""Verify, load and write ExecuTorch CUDA-backend weight files (.ptd).

    import numpy, ptd

    report = ptd.verify("model.ptd", manifest="model.manifest")
    if not report.ok:
        for e in report.errors:
            print(e.rule, e.message)

    weights = ptd.load("model.ptd", manifest="model.manifest", device="host")
    w = weights["layers.0.attn.q_proj.weight"]
    a = numpy.from_dlpack(w)          # zero-copy strided view (torch.from_dlpack too)

    ptd.write("out.ptd", "out.manifest", {"w": numpy.ones((4, 4), numpy.float32)})

    # Weights out as safetensors, and a (fine-tuned) checkpoint back in.
    ptd.extract("model.ptd", "model.safetensors", manifest="model.manifest")
    r = ptd.reweight("model.safetensors", "new.ptd", manifest="model.manifest",
                     base="model.ptd")

A thin binding over the C++ library of this repository: every rule, message
and byte decision is the C++ one (`ptd.verify(...).to_dict()` is the object
`ptd-verify --json` prints for the same inputs).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from . import _ptd
from ._ptd import Tensor

__version__ = "0.2.0"
__all__ = [
    "CancelledError",
    "Diagnostic",
    "Report",
    "ReweightReport",
    "RuntimeOwnedWeight",
    "Tensor",
    "TensorProperties",
    "Variant",
    "VerifyError",
    "Weight",
    "Weights",
    "extract",
    "load",
    "reweight",
    "verify",
    "write",
]

PathLike = Union[str, "os.PathLike[str]"]

#: ExecuTorch ScalarType number of each dtype name ("float32": 6, "bfloat16": 15, ...).
DTYPES: "dict[str, int]" = dict(_ptd.DTYPES)
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

#: Weights gathering more bytes than this get no digest (warning D1), as in ptd-verify.
DEFAULT_DIGEST_LIMIT: int = _ptd.DEFAULT_DIGEST_LIMIT


# ---- reports --------------------------------------------------------------------


class Diagnostic:
    """One error or warning: `rule` (SPEC rule ID), `message` (ends with "(RULE)"),
    and where it applies: `file`, `key`, `fqn`, `segment`, `source` (None when not given)."""

    __slots__ = ("rule", "message", "file", "key", "fqn", "segment", "source", "_d")

    def __init__(self, d: "dict[str, Any]") -> None:
        self._d = d
        self.rule: str = d.get("rule", "")
        self.message: str = d.get("message", "")
        self.file: Optional[str] = d.get("file")
        self.key: Optional[str] = d.get("key")
        self.fqn: Optional[str] = d.get("fqn")
        self.segment: Optional[int] = d.get("segment")
        self.source: Optional[str] = d.get("source")

    def to_dict(self) -> "dict[str, Any]":
        return copy.deepcopy(self._d)

    def __repr__(self) -> str:
        return f"Diagnostic({self.rule!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.file}: {self.message}" if self.file else self.message


class Report:
    """The result of a verification: `ok`, `errors`, `warnings` (tuples of
    Diagnostic), and `to_dict()`, the `ptd-verify --json` object."""

    __slots__ = ("_d", "ok", "errors", "warnings")

    def __init__(self, d: "dict[str, Any]") -> None:
        self._d = d
        self.ok: bool = bool(d["ok"])
        self.errors: "tuple[Diagnostic, ...]" = tuple(Diagnostic(e) for e in d["errors"])
        self.warnings: "tuple[Diagnostic, ...]" = tuple(Diagnostic(w) for w in d["warnings"])

    def to_dict(self) -> "dict[str, Any]":
        """The object `ptd-verify --json` prints for the same inputs (a copy)."""
        return copy.deepcopy(self._d)

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return (f"Report(ok={self.ok}, errors={len(self.errors)}, "
                f"warnings={len(self.warnings)})")


class VerifyError(ValueError):
    """A file breaks a rule: raised by `load`, `extract` and `reweight`.
    `.rule` is the rule ID of the first error (e.g. "G2"; None when the report
    has none), `.report` the full Report (for extract and reweight, the one
    error of the rule broken)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.rule: Optional[str] = report.errors[0].rule if report.errors else None
        first = str(report.errors[0]) if report.errors else "verification failed"
        more = len(report.errors) - 1
        super().__init__(first + (f" (and {more} more error(s))" if more > 0 else ""))


class CancelledError(RuntimeError):
    """A load stopped because its `progress` callback returned False."""


# ---- argument checks ---------------------------------------------------------------


def _path(p: Any, what: str) -> str:
    try:
        return os.fsdecode(os.fspath(p))
    except TypeError:
        raise TypeError(f"{what} must be a str or os.PathLike, not {type(p).__name__}") from None


def _opt_path(p: Any, what: str) -> Optional[str]:
    return None if p is None else _path(p, what)


def _int(x: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise TypeError(f"{what} must be an int, not {type(x).__name__}")
    v = x.__index__()
    if not lo <= v <= hi:
        raise ValueError(f"{what} must be in [{lo}, {hi}], not {v}")
    return v


def _bool(x: Any, what: str) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{what} must be a bool, not {type(x).__name__}")
    return x


def _str(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} must be a str, not {type(x).__name__}")
    return x


def _opt_sm(sm: Any) -> Optional[int]:
    return None if sm is None else _int(sm, "sm", 1, 2**32 - 1)


def _scalar_type(dtype: Any) -> int:
    """A numpy dtype, a name ("bfloat16"), or an ExecuTorch ScalarType number."""
    if isinstance(dtype, bool):
        raise TypeError("dtype must be a numpy dtype, a dtype name or a ScalarType number")
    if isinstance(dtype, int):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"unknown ScalarType {dtype}")
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    name = getattr(dtype, "name", None)  # numpy / ml_dtypes dtype objects
    if not isinstance(name, str):
        try:
            import numpy

            name = numpy.dtype(dtype).name
        except ImportError:
            name = None
        except TypeError:
            if isinstance(dtype, str):
                raise ValueError(f"unknown dtype {dtype!r}") from None
            raise TypeError(f"dtype {dtype!r} is not a dtype") from None
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    raise ValueError(f"dtype {dtype!r} has no ExecuTorch ScalarType")


_BYTE_SUFFIXES = {"k": 10, "m": 20, "g": 30, "t": 40}


def _byte_size(x: Any, what: str) -> int:
    """An int number of bytes, or a str as ptd-load's --device-budget takes it:
    decimal digits with an optional K, M, G or T suffix (1K = 1024), e.g. "48M"."""
    if isinstance(x, str):
        text, shift = x, 0
        if text and text[-1].lower() in _BYTE_SUFFIXES:
            text, shift = text[:-1], _BYTE_SUFFIXES[text[-1].lower()]
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"{what} must be a byte count: a decimal integer with an optional "
                             f"K, M, G or T suffix (1K = 1024), e.g. \"48M\"; not {x!r}")
        v = int(text) << shift
        if v > 2**64 - 1:
            raise ValueError(f"{what} must be in [0, {2**64 - 1}], not {x!r}")
        return v
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise TypeError(f"{what} must be an int or a str such as \"48M\", "
                        f"not {type(x).__name__}")
    return _int(x, what, 0, 2**64 - 1)


def _strs(v: Any, what: str) -> "list[str]":
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"{what} must be an iterable of str")
    out = list(v)
    if not all(isinstance(f, str) for f in out):
        raise TypeError(f"{what} must be an iterable of str")
    return out


def _device_name(device: Any, what: str = "device") -> str:
    """The device vocabulary: "host", "cpu" (an alias of "host"), "cuda" or
    "cuda:N" in; "host" or "cuda:N" out ("cuda" is cuda:0), as OpenDevice reads
    them."""
    if not isinstance(device, str):
        raise TypeError(f"{what} must be a str, not {type(device).__name__}")
    if device in ("host", "cpu"):
        return "host"
    if device == "cuda":
        return "cuda:0"
    index = device[len("cuda:"):]
    if device.startswith("cuda:") and index.isascii() and index.isdigit():
        return f"cuda:{int(index)}"
    raise ValueError(f'{what} must be "host", "cpu" (an alias of "host"), "cuda" or "cuda:N", '
                     f"not {device!r}")


def _ints(v: Any, what: str, lo: int = -(2**63), hi: int = 2**63 - 1) -> "tuple[int, ...]":
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"{what} must be a sequence of ints")
    return tuple(_int(x, what, lo, hi) for x in v)


# ---- verify --------------------------------------------------------------------


def verify(
    ptd: PathLike,
    *,
    manifest: Optional[PathLike] = None,
    pte: Optional[PathLike] = None,
    sm: Optional[int] = None,
    digest: bool = False,
    digest_limit: int = DEFAULT_DIGEST_LIMIT,
    signature: Optional[PathLike] = None,
    public_key: Optional[PathLike] = None,
    certificate_chain: Optional[PathLike] = None,
    model_dir: Optional[PathLike] = None,
) -> Report:
    """Checks every rule over a .ptd and optionally a standalone manifest and/or
    a .pte, as `ptd-verify` does. A file that breaks a rule gives a Report (not
    an exception); a file that cannot be read raises OSError (FileNotFoundError
    when missing). `sm` reports the variant each manifest would run; `digest`
    adds SHA-256 of each key's bytes and each view's elements. The GIL is
    released while it runs.

    `signature` (a model_signing signature file, e.g. "model.sig") checks the
    signed model folder too (`model_dir`, by default the .ptd's folder): the
    signature against `public_key` (an EC public key, PEM) or
    `certificate_chain` (the certificates you trust, PEM), then every file's
    digest. A broken rule (A1-A7) is an error of the Report, and
    report.to_dict()["signature"] says what ran."""
    d = _ptd.verify(
        _path(ptd, "ptd"),
        _opt_path(manifest, "manifest"),
        _opt_path(pte, "pte"),
        _opt_sm(sm),
        bool(digest),
        _int(digest_limit, "digest_limit", 0, 2**64 - 1),
        _opt_path(signature, "signature"),
        _opt_path(public_key, "public_key"),
        _opt_path(certificate_chain, "certificate_chain"),
        _opt_path(model_dir, "model_dir"),
    )
    return Report(d)


# ---- load ----------------------------------------------------------------------


class RuntimeOwnedWeight:
    """A manifest entry whose storage the runtime provides (not in the .ptd)."""

    __slots__ = ("fqn", "dtype", "shape", "strides", "offset", "required_nbytes",
                 "storage_key", "storage_nbytes", "source")

    def __init__(self, **kw: Any) -> None:
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @classmethod
    def _of(cls, j: "Mapping[str, Any]") -> "RuntimeOwnedWeight":
        # From `ptd-load --json`'s "runtime_owned" entry, named as Tensor names
        # the same fields (dtype by name, shape, offset in elements).
        return cls(fqn=j["fqn"], dtype=_DTYPE_NAMES.get(j["dtype"], j["dtype"]),
                   shape=tuple(j["sizes"]), strides=tuple(j["strides"]),
                   offset=j["storage_offset"], required_nbytes=j["required_nbytes"],
                   storage_key=j["storage_key"], storage_nbytes=j["storage_nbytes"],
                   source=j["source"])

    def __repr__(self) -> str:
        return f"RuntimeOwnedWeight({self.fqn!r}, {self.dtype}, {self.shape})"


class Weights(Mapping):
    """Loaded weights: a read-only mapping from fqn to Tensor (or, for a .ptd
    without a manifest, from key to bytes). Tensors keep their storage alive
    after this object is gone."""

    def __init__(self, native: Any) -> None:
        self._w = native
        self._names: "tuple[str, ...]" = tuple(native.names)
        self._set = frozenset(self._names)
        self._runtime_owned: "tuple[RuntimeOwnedWeight, ...]" = tuple(
            RuntimeOwnedWeight._of(d) for d in getattr(native, "runtime_owned", ()))

    def __getitem__(self, name: str) -> Any:
        if not isinstance(name, str) or name not in self._set:
            raise KeyError(name)
        return self._w.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._set

    @property
    def has_manifest(self) -> bool:
        """False when the mapping is key -> bytes (no manifest was given)."""
        return not self._w.by_key

    @property
    def device(self) -> str:
        """The device loaded onto: "host" or "cuda:N", words `load`'s `device`
        takes (`device_description` says which GPU it is)."""
        return self._w.device

    @property
    def device_description(self) -> str:
        """The device loaded onto, described: "host", or e.g. "cuda:0 (NVIDIA H200,
        sm_90)" (the C++ Device::name())."""
        return self._w.device_description

    @property
    def timings(self) -> "dict[str, float]":
        """`ptd-load --json`'s "timings": seconds per phase (verify_s, plan_s, map_s,
        allocate_s, read_s, copy_s, wait_s, finish_s, total_s, first_weight_s) and the
        rates gbps and read_gbps (10^9 bytes per second)."""
        return self._w.timings

    @property
    def stats(self) -> "dict[str, Any]":
        """`ptd-load --json`'s "load": weights, reused, runtime_owned, storages, bytes,
        allocations, reads, bytes_read, copies, copy_calls, bytes_via_scratch, mapped,
        mapped_bytes, mappings (mapped counts `map_file`'s file mappings),
        huge_page_bytes, threads, placement (as the property), device_budget and io
        (as the property)."""
        return self._w.stats

    @property
    def placement(self) -> "dict[str, dict[str, int]]":
        """Where the storages went, as `ptd-load --json`'s "placement":
        {"device": {"storages": n, "bytes": n}, "mapped_host": {...}, "host": {...}}
        (each Tensor's `residency` is one of these keys). They add up to stats'
        storages and bytes; everything is "host" on the host device, and "mapped_host"
        holds what `device_budget` and `host_fqns` kept off the GPU."""
        return self._w.placement

    @property
    def io(self) -> "dict[str, Any]":
        """How the file's bytes were read, as `ptd-load --json`'s load.io:
        {"requested", "engines": {"buffered", "direct", "gds"} (bytes each read),
        "gds_mode", "fallbacks": [{"from", "to", "reason"}], "cached_bytes" (of the
        file, in the page cache when the load began), "file_bytes", "queue",
        "direct_readers" (threads that read while `direct` could serve),
        "choice" (why `io="auto"` chose as it did)}."""
        return self._w.io

    @property
    def signature(self) -> "Optional[dict[str, Any]]":
        """The signature check of a signed load (None without one), as the
        `signature` object of `ptd-load --json`: {"checked", "verified",
        "signature", "model_dir", "method", "serialization", "hash",
        "shard_size", "one_pass", "one_pass_note", "files": [{"name", "bytes",
        "read" ("load": hashed on the load's reads; "apart"), "ok", "error"}],
        "error", "rule"}."""
        return self._w.signature

    @property
    def runtime_owned(self) -> "tuple[RuntimeOwnedWeight, ...]":
        """Entries whose storage the runtime provides (not loaded from the file)."""
        return self._runtime_owned

    def __repr__(self) -> str:
        return f"ptd.Weights({len(self)} entries on {self.device})"


def load(
    ptd: PathLike,
    *,
    manifest: Optional[PathLike] = None,
    pte: Optional[PathLike] = None,
    device: str = "auto",
    fqns: Optional[Iterable[str]] = None,
    sm: Optional[int] = None,
    threads: Optional[int] = None,
    map_file: bool = False,
    progress: Optional[Callable[[int, int], Optional[bool]]] = None,
    device_budget: Optional[Union[int, str]] = None,
    host_fqns: Optional[Iterable[str]] = None,
    io: str = "auto",
    share_segments: bool = False,
    signature: Optional[PathLike] = None,
    public_key: Optional[PathLike] = None,
    certificate_chain: Optional[PathLike] = None,
    model_dir: Optional[PathLike] = None,
) -> Weights:
    """Opens, verifies and loads weights onto `device` ("host", "cuda", "cuda:N"
    or "auto": cuda:0 when there is one, else the host; "cpu" is an alias of
    "host"). The result's `device` and each Tensor's say "host" or "cuda:N".

    A file that breaks a rule raises VerifyError (a ValueError) carrying the
    Report; a file that cannot be read raises OSError. `fqns` loads a subset
    (KeyError for an fqn in no manifest). `progress(done, total)` is called as
    bytes arrive; returning False cancels the load (CancelledError), and an
    exception it raises (KeyboardInterrupt) propagates; either way everything
    allocated is freed. The GIL is released while loading.

    `map_file=True` (host memory only) maps storages from the file instead of
    reading them: private and copy-on-write (writing a tensor never changes
    the file), populated from the page cache, so a cached file loads without
    a copy (stats["mapped"] counts them). But a process that writes the file
    in place changes the loaded weights, and one that truncates it makes
    touching them raise SIGBUS: leave it off where files may change.

    `device_budget` (a CUDA device only) caps the GPU memory the load takes, in
    bytes (an int, or a str such as "48M": K, M, G or T suffix, 1K = 1024):
    storages go to GPU memory in manifest order until the next does not fit;
    that one and the rest go to pinned host memory mapped for the GPU
    (Tensor.residency "mapped_host"), which kernels read directly over the bus.
    0 keeps every storage off the GPU; None (the default) puts all on it. The
    budget is a cap: a GPU share it places over the GPU's free memory (less a
    reserve of 1/64 of it, at most 256 MiB), or a mapped share over the host
    memory that can be pinned, raises MemoryError before anything is
    allocated.
    `host_fqns` (a CUDA device only) lists fnmatch patterns ("tok_embeddings.*")
    whose weights' storages go to mapped host memory before the budget is
    counted (without a manifest they match keys; a pattern matching nothing is
    no error). Either one on the host device raises ValueError. `placement`
    and each Tensor's `residency` say where the storages went.

    `io` picks how the file is read: "direct" past the page cache (O_DIRECT,
    several requests in flight; the page cache is left as it was), "buffered"
    through it, "auto" (the default) per range by what the page cache already
    holds, or "gds" (GPUDirect Storage into GPU memory: cuFile, loaded at run
    time; without it, or in its compatibility mode, the GPU's storages are read
    direct). An
    engine that cannot run falls back, never fails, and `io` on the result
    says which ran and why (ValueError for another name).

    Each storage key gets its own memory, as upstream's runtime gives it: an
    AOTInductor program writes the buffers it mutates (KV caches) in place,
    and the exporter stores keys with equal bytes (every layer's zero-filled
    cache) once. `share_segments=True` gives keys that share stored bytes one
    copy, for weights no program writes.

    `signature`, with `public_key` or `certificate_chain` (and `model_dir`), as
    in verify(): a signed model is checked as it loads. The other files of the
    folder are hashed first; the .ptd's digests ride on the load's own reads
    (no byte is read twice). A broken rule (A1-A7: a tampered weight is A5)
    raises VerifyError naming it, and nothing is handed out. The result's
    `signature` says what ran."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a str, not {type(device).__name__}")
    fqn_list = None if fqns is None else _strs(fqns, "fqns")
    budget = None if device_budget is None else _byte_size(device_budget, "device_budget")
    host_list = [] if host_fqns is None else _strs(host_fqns, "host_fqns")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable")
    r = _ptd.load(
        _path(ptd, "ptd"),
        _opt_path(manifest, "manifest"),
        _opt_path(pte, "pte"),
        device,
        fqn_list,
        _opt_sm(sm),
        None if threads is None else _int(threads, "threads", 1, 256),
        _bool(map_file, "map_file"),
        progress,
        budget,
        host_list,
        _str(io, "io"),
        _bool(share_segments, "share_segments"),
        _opt_path(signature, "signature"),
        _opt_path(public_key, "public_key"),
        _opt_path(certificate_chain, "certificate_chain"),
        _opt_path(model_dir, "model_dir"),
    )
    if isinstance(r, dict):
        raise VerifyError(Report(r))
    return Weights(r)


# ---- write ---------------------------------------------------------------------


class TensorProperties:
    """The original buffer, as torch's TensorProperties describe it: shape,
    stride and offset in elements, storage_size in bytes (or None)."""

    __slots__ = ("shape", "stride", "offset", "storage_size")

    def __init__(self, shape: Iterable[int], stride: Iterable[int], offset: int = 0,
                 storage_size: Optional[int] = None) -> None:
        self.shape = _ints(shape, "shape")
        self.stride = _ints(stride, "stride")
        if len(self.shape) != len(self.stride):
            raise ValueError(f"shape has {len(self.shape)} dims but stride {len(self.stride)}")
        self.offset = _int(offset, "offset", -(2**63), 2**63 - 1)
        self.storage_size = (None if storage_size is None
                             else _int(storage_size, "storage_size", 0, 2**64 - 1))

    def __repr__(self) -> str:
        return (f"TensorProperties(shape={self.shape}, stride={self.stride}, "
                f"offset={self.offset}, storage_size={self.storage_size})")


class Weight:
    """The value AOTI hands the collector: its whole `storage` (bytes or any
    buffer), its own view (`sizes`, `strides`, `offset`, in elements), the
    `properties` of the original buffer (default: its own view), whether the
    storage is the original buffer's, and the device the storage lives on:
    "host", "cpu" (an alias of "host"), "cuda" or "cuda:N" in, and `device` is
    "host" or "cuda:N" ("cuda" is cuda:0; the file records only host or CUDA)."""

    __slots__ = ("storage", "scalar_type", "sizes", "strides", "offset", "properties",
                 "original_storage", "device")

    def __init__(self, storage: Any, *, dtype: Any, sizes: Iterable[int],
                 strides: Iterable[int], offset: int = 0,
                 properties: Optional[TensorProperties] = None,
                 original_storage: bool = False, device: str = "cuda") -> None:
        try:
            mv = memoryview(storage)
        except TypeError:
            raise TypeError(
                f"storage must be bytes or a buffer, not {type(storage).__name__}") from None
        self.storage = mv.cast("B") if mv.c_contiguous else memoryview(mv.tobytes())
        self.scalar_type = _scalar_type(dtype)
        self.sizes = _ints(sizes, "sizes")
        self.strides = _ints(strides, "strides")
        if len(self.sizes) != len(self.strides):
            raise ValueError(f"sizes has {len(self.sizes)} dims but strides {len(self.strides)}")
        self.offset = _int(offset, "offset", -(2**63), 2**63 - 1)
        if properties is not None and not isinstance(properties, TensorProperties):
            raise TypeError("properties must be a ptd.TensorProperties")
        self.properties = properties
        self.original_storage = bool(original_storage)
        self.device = _device_name(device)

    @property
    def dtype(self) -> str:
        return _DTYPE_NAMES[self.scalar_type]

    @classmethod
    def from_array(cls, a: Any, properties: Optional[TensorProperties] = None,
                   *, device: str = "cuda") -> "Weight":
        """A NumPy array or any DLPack producer on the host: its storage is the
        bytes of the array's minimal span, its view the array's own."""
        storage, st, sizes, strides = _ptd.array_storage(a)
        return cls(storage, dtype=st, sizes=sizes, strides=strides, offset=0,
                   properties=properties, original_storage=False, device=device)

    def __repr__(self) -> str:
        return f"Weight({self.dtype}, sizes={self.sizes}, strides={self.strides})"


class Variant:
    """One AOTI library of a manifest: its so_blob_key and the device it targets."""

    __slots__ = ("so_blob_key", "target_sm", "ptx_compute", "fallback_only")

    def __init__(self, so_blob_key: str, target_sm: int = 0, ptx_compute: int = 0,
                 fallback_only: bool = False) -> None:
        if not isinstance(so_blob_key, str):
            raise TypeError("so_blob_key must be a str")
        self.so_blob_key = so_blob_key
        self.target_sm = _int(target_sm, "target_sm", 0, 2**32 - 1)
        self.ptx_compute = _int(ptx_compute, "ptx_compute", 0, 2**32 - 1)
        self.fallback_only = bool(fallback_only)


DEFAULT_SO_BLOB_KEY = "aoti_cuda_blob"


def write(
    ptd_path: PathLike,
    manifest_path: Optional[PathLike],
    weights: "Mapping[str, Any]",
    *,
    format: str = "ETCUDAFQN0",
    variants: Optional[Iterable[Union[Variant, "Mapping[str, Any]"]]] = None,
    so_blob_key: Optional[str] = None,
    segment_alignment: int = 128,
) -> None:
    """Writes a .ptd and (unless manifest_path is None) its standalone manifest
    the exporter's way, through the C++ CudaWeightWriter (rules W1-W3).

    `weights` maps fqn to a ptd.Weight, or to an array (= Weight.from_array(a)).
    A refused weight raises ValueError with the exporter's wording and the rule,
    e.g. "AOTI view 'x' requires 236 bytes from a 232-byte cloned storage (W3)";
    a refused or failed write leaves no file (each file is written atomically).
    `so_blob_key` names the library that library-local constants belong to
    (default: the first variant's, else "aoti_cuda_blob")."""
    if not isinstance(weights, Mapping):
        raise TypeError("weights must be a mapping from fqn to ptd.Weight or array")
    if not isinstance(format, str):
        raise TypeError("format must be a str")
    vs = []
    for v in (variants or ()):
        if isinstance(v, Mapping):
            v = Variant(**v)
        if not isinstance(v, Variant):
            raise TypeError("variants must be ptd.Variant objects or dicts")
        vs.append((v.target_sm, v.ptx_compute, 1 if v.fallback_only else 0, v.so_blob_key))
    if so_blob_key is None:
        so_blob_key = vs[0][3] if vs else DEFAULT_SO_BLOB_KEY
    elif not isinstance(so_blob_key, str):
        raise TypeError("so_blob_key must be a str")
    specs = []
    for fqn, w in weights.items():
        if not isinstance(fqn, str):
            raise TypeError(f"weight names must be str, not {type(fqn).__name__}")
        if not isinstance(w, Weight):
            w = Weight.from_array(w)
        p = w.properties or TensorProperties(w.sizes, w.strides, w.offset)
        cuda = _device_name(w.device, f"weight {fqn!r}: device") != "host"
        specs.append((fqn, w.storage, w.scalar_type, 1 if cuda else 0,
                      list(w.sizes), list(w.strides), w.offset, w.original_storage,
                      (list(p.shape), list(p.stride), p.offset, p.storage_size)))
    _ptd.write(
        _path(ptd_path, "ptd_path"),
        _opt_path(manifest_path, "manifest_path"),
        specs,
        format,
        vs,
        so_blob_key,
        _int(segment_alignment, "segment_alignment", 1, 2**32),
    )


# ---- safetensors: extract and reweight --------------------------------------------


class ReweightReport(Report):
    """What `reweight` did: `written` (fqns whose bytes came from the
    checkpoint), `kept` (fqns kept from the base), `unused` (checkpoint
    tensors no weight uses), `zero_filled` ((key, offset, nbytes) of storage
    bytes no view covers and no base supplied) and `zero_filled_bytes`; with
    Report's `ok`, `errors` (empty: a broken rule raises) and `warnings`
    (unused tensors, kept weights, zero-filled bytes)."""

    __slots__ = ("written", "kept", "unused", "zero_filled", "zero_filled_bytes")

    def __init__(self, d: "dict[str, Any]") -> None:
        super().__init__(d)
        self.written: "tuple[str, ...]" = tuple(d["written"])
        self.kept: "tuple[str, ...]" = tuple(d["kept"])
        self.unused: "tuple[str, ...]" = tuple(d["unused"])
        self.zero_filled: "tuple[tuple[str, int, int], ...]" = tuple(
            (z["key"], z["offset"], z["nbytes"]) for z in d["zero_filled"])
        self.zero_filled_bytes: int = d["zero_filled_bytes"]

    def __repr__(self) -> str:
        return (f"ReweightReport(ok={self.ok}, written={len(self.written)}, "
                f"kept={len(self.kept)}, unused={len(self.unused)}, "
                f"zero_filled_bytes={self.zero_filled_bytes}, "
                f"warnings={len(self.warnings)})")


def _checked(d: "dict[str, Any]") -> "dict[str, Any]":
    if not d["ok"]:
        raise VerifyError(Report(d))
    return d


def extract(
    ptd_path: PathLike,
    out: PathLike,
    *,
    manifest: Optional[PathLike] = None,
    pte: Optional[PathLike] = None,
    max_shard_size: Optional[Union[int, str]] = None,
) -> "list[str]":
    """Writes the weights of a .ptd (with its standalone manifest or .pte) as
    a safetensors checkpoint (docs/SPEC.md section 7): each stored weight's
    view, gathered row-major, under its fqn; runtime-owned entries are left
    out. Without a manifest or .pte, each key's bytes as a U8 tensor.

    `out` is one .safetensors file; with `max_shard_size` (bytes: an int, or a
    str such as "5G"; a larger tensor gets a shard of its own) it is a folder
    of Hugging Face shards ("model-00001-of-00002.safetensors") and
    model.safetensors.index.json. Returns the names written, in manifest
    order. A file that breaks a rule raises VerifyError naming the rule; a
    weight whose dtype has no safetensors name (complex64, ...) ValueError
    naming the weight; a file that cannot be read or written OSError. After
    an error, `out` is as it was. The GIL is released while it runs."""
    shard = None
    if max_shard_size is not None:
        shard = _byte_size(max_shard_size, "max_shard_size")
        if shard == 0:
            raise ValueError("max_shard_size must be at least 1 byte, not 0")
    d = _checked(_ptd.extract(
        _path(ptd_path, "ptd_path"),
        _opt_path(manifest, "manifest"),
        _opt_path(pte, "pte"),
        _path(out, "out"),
        shard,
    ))
    return [t["name"] for t in d["tensors"]]


def reweight(
    checkpoint: PathLike,
    out: PathLike,
    *,
    manifest: Optional[PathLike] = None,
    pte: Optional[PathLike] = None,
    base: Optional[PathLike] = None,
    rename: Optional["Mapping[str, str]"] = None,
) -> ReweightReport:
    """Builds the .ptd whose views show the tensors of `checkpoint` (a
    .safetensors file, or a sharded checkpoint's *.safetensors.index.json)
    for the program of `manifest` or `pte`, and writes it to `out` once it
    passes every rule (docs/SPEC.md section 7, S8-S10; warnings S11, S12).

    Each weight takes the checkpoint tensor of its fqn, which must have its
    dtype and shape (S8); weights whose views share bytes must agree on them
    (S9). `base`, a .ptd for the same program, supplies the storages of
    weights the checkpoint lacks (else S10) and the bytes no view covers
    (else zeros). Without a manifest or .pte, `base` is required and each of
    its keys is read as a U8 tensor. `rename` maps checkpoint-name prefixes
    to fqn prefixes before lookup ({"model.": ""} strips "model."; the
    longest matching prefix wins).

    Returns a ReweightReport (`written`, `kept`, `unused`, `warnings`, ...).
    A broken rule raises VerifyError naming it, and a file that cannot be
    read raises OSError; either way `out` is left as it was. The GIL is
    released while it runs."""
    pairs: "list[tuple[str, str]]" = []
    if rename is not None:
        if not isinstance(rename, Mapping):
            raise TypeError(f"rename must be a mapping from prefix to prefix, "
                            f"not {type(rename).__name__}")
        for k, v in rename.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("rename must map str prefixes to str prefixes")
            pairs.append((k, v))
    d = _checked(_ptd.reweight(
        _path(checkpoint, "checkpoint"),
        _opt_path(manifest, "manifest"),
        _opt_path(pte, "pte"),
        _path(out, "out"),
        _opt_path(base, "base"),
        pairs,
    ))
    return ReweightReport(d)


def __dir__() -> "list[str]":
    """dir(ptd): the public names (__all__) and the module's constants, not
    the names it imports for its own use (os, copy, typing's)."""
    return sorted({*__all__, "DTYPES", "DEFAULT_DIGEST_LIMIT", "DEFAULT_SO_BLOB_KEY",
                   "PathLike", "__version__"})
