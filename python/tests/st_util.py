"""Helpers of the safetensors tests (test_safetensors.py, test_reweight.py):
models written by ptd.write, and safetensors files read and written with the
real `safetensors` package (PyPI), the format's reference implementation."""
import json
import pathlib

import numpy as np
import pytest

import ptd

safetensors = pytest.importorskip("safetensors")
from safetensors.numpy import load_file, save_file  # noqa: E402

# SPEC section 7: safetensors dtype name <-> ExecuTorch ScalarType.
ST_DTYPES = {"U8": 0, "I8": 1, "I16": 2, "I32": 3, "I64": 4, "F16": 5, "F32": 6, "F64": 7,
             "BOOL": 11, "BF16": 15, "F8_E5M2": 23, "F8_E4M3": 24, "U16": 27, "U32": 28,
             "U64": 29}
SCALAR_TO_ST = {v: k for k, v in ST_DTYPES.items()}
# The names safetensors' Python writer takes for them (torch's spelling).
ST_NAMES = {"U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
            "F16": "float16", "F32": "float32", "F64": "float64", "BOOL": "bool",
            "BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
            "U16": "uint16", "U32": "uint32", "U64": "uint64"}


def view_array(t):
    """A loaded ptd.Tensor as a NumPy array (bf16 as uint16: the same bytes)."""
    return np.from_dlpack(t.view_as("uint16") if t.dtype == "bfloat16" else t)


def view_bytes(t):
    """A loaded view's elements gathered row-major: what extract writes."""
    return np.ascontiguousarray(view_array(t)).tobytes()


def read_raw(path):
    """{name: (dtype, shape, bytes)} of a safetensors file, through the
    reference reader (safetensors.deserialize: raw bytes, BF16 included)."""
    data = pathlib.Path(path).read_bytes()
    return {name: (v["dtype"], list(v["shape"]), bytes(v["data"]))
            for name, v in safetensors.deserialize(data)}


def read_header(path):
    """(N, the header's JSON object, the raw header bytes) of a file."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    raw = data[8:8 + n]
    return n, json.loads(raw), raw


def save_raw(tensors, path, metadata=None):
    """Writes {name: numpy array or (ST dtype, shape, bytes)} with the
    reference writer; the tuples carry dtypes NumPy lacks (BF16)."""
    if all(isinstance(v, np.ndarray) for v in tensors.values()):
        save_file(tensors, str(path), metadata=metadata)
        return
    keep = []
    specs = {}
    for name, v in tensors.items():
        if isinstance(v, np.ndarray):
            buf = np.ascontiguousarray(v)
            dtype, shape, data = buf.dtype.name, list(buf.shape), buf.tobytes()
        else:
            st, shape, data = v
            dtype = ST_NAMES[st]
            buf = np.frombuffer(bytearray(data or b"\0"), np.uint8)
        keep.append(buf)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
            specs[name] = safetensors.TensorSpec(dtype=dtype, shape=list(shape),
                                                 data_ptr=buf.ctypes.data, data_len=len(data))
        else:  # Earlier releases take dicts of bytes.
            specs[name] = {"dtype": dtype, "shape": list(shape), "data": data}
    safetensors.serialize_file(specs, str(path), metadata=metadata)


def write_index(folder, weight_map, name="model.safetensors.index.json"):
    """A sharded checkpoint's index as Hugging Face lays it out."""
    folder = pathlib.Path(folder)
    total = sum(len(read_raw(folder / f)[n][2]) for n, f in weight_map.items())
    index = folder / name
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                indent=2))
    return index


def checkpoint_of(weights):
    """{fqn: numpy array} of every loaded weight (bf16 as uint16) as a
    writable copy: the tensors a fine-tuner would change."""
    return {n: np.array(view_array(weights[n])) for n in weights}


# ---- models written by ptd.write ----------------------------------------------------


def plain_weights():
    """Weights NumPy can hold (safetensors.numpy round trips them): a fused
    qkv (three views into one buffer: each fqn gets its own 192-byte storage
    key, the writer stores the bytes once), embeddings tied the same way, a
    strided clone whose storage keeps gaps no view covers, a CPU-side table,
    float16 and bool. No two of its views share a storage key: for S9, see
    the conformance case k02."""
    rng = np.random.default_rng(35)
    qkv = rng.standard_normal(48).astype(np.float32)
    props = lambda off: ptd.TensorProperties((4, 4), (4, 1), offset=off, storage_size=192)  # noqa
    w = {n: ptd.Weight(qkv, dtype="float32", sizes=(4, 4), strides=(4, 1), offset=off,
                       original_storage=True, properties=props(off))
         for n, off in (("layers.0.attn.q", 0), ("layers.0.attn.k", 16),
                        ("layers.0.attn.v", 32))}
    emb = rng.standard_normal((8, 4)).astype(np.float32)
    for n in ("tok_embeddings.weight", "output.weight"):
        w[n] = ptd.Weight(emb, dtype="float32", sizes=(8, 4), strides=(4, 1),
                          original_storage=True,
                          properties=ptd.TensorProperties((8, 4), (4, 1), 0, 128))
    big = np.arange(64, dtype=np.float32).reshape(8, 8) + 0.5
    w["layers.0.attn.cols"] = ptd.Weight.from_array(
        big[:, 1:3], ptd.TensorProperties((8, 2), (8, 1), offset=1, storage_size=256))
    w["layers.0.norm.weight"] = rng.standard_normal(16).astype(np.float16)
    w["cpu_side.table"] = ptd.Weight.from_array(np.arange(5, dtype=np.int64) * 7,
                                                device="cpu")
    w["mask"] = np.array([True, False, True, True])
    w["layers.0.mlp.w1"] = rng.integers(-100, 100, (3, 5), dtype=np.int32)
    return w


def uncovered_bytes(loaded):
    """How many bytes of the storages of `loaded` (ptd.Weights) no view
    covers: what reweight zero-fills without a base."""
    covered, sizes = {}, {}
    for n in loaded:
        t = loaded[n]
        sizes[t.storage_key] = t.storage_nbytes
        cover = covered.setdefault(t.storage_key, np.zeros(t.storage_nbytes, bool))
        if 0 in t.shape:
            continue
        idx = np.full(t.shape, t.offset, np.int64)
        for axis, stride in enumerate(t.strides):
            shape = [1] * len(t.shape)
            shape[axis] = t.shape[axis]
            idx = idx + np.arange(t.shape[axis]).reshape(shape) * stride
        for b in range(t.itemsize):
            cover[np.ravel(idx) * t.itemsize + b] = True
    return sum(int((~c).sum()) for c in covered.values())


def bf16_weights():
    """plain_weights() plus a bfloat16 head and a library-local constant."""
    w = plain_weights()
    bits = (np.arange(30, dtype=np.uint16) * 3 + 0x3F80).astype(np.uint16)
    w["lm_head.weight"] = ptd.Weight(bits, dtype="bfloat16", sizes=(6, 5), strides=(5, 1))
    w["_tensor_constant0"] = np.arange(6, dtype=np.int32).reshape(2, 3)
    return w


def write_model(folder, weights, **kw):
    """ptd.write into `folder`: (ptd path, manifest path)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    p, m = folder / "model.ptd", folder / "model.manifest"
    ptd.write(p, m, weights, **kw)
    assert ptd.verify(p, manifest=m).ok
    return p, m
