"""ptd.write through the C++ CudaWeightWriter: the seed's cases (docs/SPEC.md
section 3), round-tripped through ptd.verify and ptd.load."""
import hashlib

import numpy as np
import pytest

import ptd


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def written(tmp_path, weights, **kw):
    p, m = tmp_path / "w.ptd", tmp_path / "w.manifest"
    ptd.write(p, m, weights, **kw)
    report = ptd.verify(p, manifest=m, digest=True)
    assert report.ok, report.errors
    entries = {w["fqn"]: w for w in report.to_dict()["manifests"][0]["weights"]}
    return p, m, report, entries


def test_rows_compact_clone(tmp_path, ptd_verify):
    big = np.arange(32, dtype=np.float32).reshape(8, 4) * 1.5
    rows = ptd.Weight.from_array(
        big[2:5], ptd.TensorProperties((3, 4), (4, 1), offset=8, storage_size=128))
    p, m, report, e = written(tmp_path, {"layers.0.attn.rows": rows})
    w = e["layers.0.attn.rows"]
    assert (w["storage_offset"], w["storage_nbytes"], w["required_nbytes"]) == (0, 48, 48)
    assert w["storage_key"] == "cuda_fqn_weight:cuda:layers.0.attn.rows"
    assert w["sha256"] == sha(big[2:5])
    assert report.to_dict() == ptd_verify(str(p), "--manifest", str(m), "--digest")[1]
    loaded = ptd.load(p, manifest=m, device="host")
    np.testing.assert_array_equal(np.from_dlpack(loaded["layers.0.attn.rows"]), big[2:5])


def test_cols_strided_clone(tmp_path):
    big = np.arange(64, dtype=np.float32).reshape(8, 8)
    cols = ptd.Weight.from_array(
        big[:, 1:3], ptd.TensorProperties((8, 2), (8, 1), offset=1, storage_size=256))
    assert cols.storage.nbytes == 232  # The minimal span keeps the row gaps.
    p, m, _, e = written(tmp_path, {"layers.0.attn.cols": cols})
    w = e["layers.0.attn.cols"]
    assert (w["storage_offset"], w["storage_nbytes"], w["required_nbytes"]) == (0, 232, 232)
    assert w["strides"] == [8, 1] and w["sha256"] == sha(big[:, 1:3])
    t = ptd.load(p, manifest=m, device="host")["layers.0.attn.cols"]
    np.testing.assert_array_equal(np.from_dlpack(t), big[:, 1:3])


def test_truncated_clone_rejected_w3(tmp_path):
    storage = np.arange(58, dtype=np.float32)  # big[:, 1:3]'s 232-byte clone.
    x = ptd.Weight(storage, dtype=np.float32, sizes=(8, 2), strides=(8, 1),
                   original_storage=True,
                   properties=ptd.TensorProperties((8, 2), (8, 1), offset=1, storage_size=232))
    with pytest.raises(ValueError) as info:
        ptd.write(tmp_path / "w.ptd", tmp_path / "w.manifest", {"x": x})
    assert str(info.value) == ("AOTI view 'x' requires 236 bytes from a 232-byte cloned "
                               "storage (W3)")
    assert list(tmp_path.iterdir()) == []  # A refused write leaves no file.


def test_w2_storage_smaller_than_properties(tmp_path):
    v = ptd.Weight(bytes(48), dtype="float32", sizes=(3, 4), strides=(1, 3),
                   properties=ptd.TensorProperties((3, 4), (4, 1), offset=0, storage_size=128))
    with pytest.raises(ValueError, match=r"^AOTI cloned storage is smaller than its "
                                         r"TensorProperties \(48 < 128 bytes\) \(W2\)$"):
        ptd.write(tmp_path / "w.ptd", None, {"x": v})
    assert list(tmp_path.iterdir()) == []


def test_w1_clone_with_extra_bytes_rejected(tmp_path):
    v = ptd.Weight(bytes(52), dtype="float32", sizes=(3, 4), strides=(4, 1))
    with pytest.raises(ValueError, match=r"\(W1\)"):
        ptd.write(tmp_path / "w.ptd", tmp_path / "w.manifest", {"x": v})


def test_refused_write_keeps_old_file(tmp_path):
    p, m = tmp_path / "w.ptd", tmp_path / "w.manifest"
    ptd.write(p, m, {"a": np.ones(4, np.float32)})
    before = p.read_bytes(), m.read_bytes()
    bad = ptd.Weight(bytes(4), dtype="float32", sizes=(4,), strides=(1,))
    with pytest.raises(ValueError):
        ptd.write(p, m, {"a": bad})
    assert (p.read_bytes(), m.read_bytes()) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.manifest", "w.ptd"]


def test_fused_qkv_on_one_storage(tmp_path):
    qkv = np.arange(48, dtype=np.float32)
    props = lambda off: ptd.TensorProperties((4, 4), (4, 1), offset=off, storage_size=192)  # noqa
    weights = {n: ptd.Weight(qkv, dtype="float32", sizes=(4, 4), strides=(4, 1), offset=off,
                             original_storage=True, properties=props(off))
               for n, off in (("q", 0), ("k", 16), ("v", 32))}
    p, m, report, e = written(tmp_path, weights)
    assert [e[n]["storage_offset"] for n in "qkv"] == [0, 16, 32]
    # Identical storages are stored once: three keys on one segment. A load
    # gives each key its own memory, or one copy with share_segments.
    assert ptd.load(p, manifest=m, device="host").stats["storages"] == 3
    loaded = ptd.load(p, manifest=m, device="host", share_segments=True)
    assert loaded.stats["storages"] == 1
    for n, off in (("q", 0), ("k", 16), ("v", 32)):
        np.testing.assert_array_equal(np.from_dlpack(loaded[n]),
                                      qkv[off:off + 16].reshape(4, 4))


def test_dtypes_bf16_and_cpu_device(tmp_path):
    bits = np.arange(30, dtype=np.uint16) + 0x3F80
    w = ptd.Weight(bits, dtype="bfloat16", sizes=(6, 5), strides=(5, 1))
    table = ptd.Weight.from_array(np.arange(5, dtype=np.int64), device="cpu")
    assert table.device == "host" and w.device == "cuda:0"
    p, m, _, e = written(tmp_path, {"lm_head.weight": w, "cpu_side.table": table,
                                    "i": ptd.Weight(bytes(8), dtype=3, sizes=(2,),
                                                    strides=(1,))})
    assert e["lm_head.weight"]["dtype"] == 15 and e["i"]["dtype"] == 3
    assert e["cpu_side.table"]["device_type"] == 0
    assert e["cpu_side.table"]["storage_key"] == "cuda_fqn_weight:cpu:cpu_side.table"
    t = ptd.load(p, manifest=m, device="host")["lm_head.weight"]
    assert t.dtype == "bfloat16"
    np.testing.assert_array_equal(np.from_dlpack(t.view_as("uint16")), bits.reshape(6, 5))


@pytest.mark.parametrize("device, name, device_type", [
    ("host", "host", 0),
    ("cpu", "host", 0),  # an alias of "host"
    ("cuda", "cuda:0", 1),
    ("cuda:1", "cuda:1", 1),
])
def test_weight_device_vocabulary(tmp_path, device, name, device_type):
    """Weight(device=) takes the words ptd.load does and says "host" or "cuda:N"."""
    w = ptd.Weight.from_array(np.arange(4, dtype=np.float32), device=device)
    assert w.device == name
    _, _, _, e = written(tmp_path, {"a": w})
    assert e["a"]["device_type"] == device_type
    side = "cpu" if device_type == 0 else "cuda"
    assert e["a"]["storage_key"] == f"cuda_fqn_weight:{side}:a"


def test_library_constant_and_variants(tmp_path):
    c = np.arange(6, dtype=np.int32).reshape(2, 3)
    variants = [ptd.Variant("lib_sm90", target_sm=90), {"so_blob_key": "lib_ptx",
                                                       "target_sm": 80, "ptx_compute": 80,
                                                       "fallback_only": True}]
    _, _, report, e = written(tmp_path, {"_tensor_constant0": c}, variants=variants)
    assert e["_tensor_constant0"]["storage_key"] == \
        "cuda_fqn_weight:cuda:lib_sm90:_tensor_constant0"
    vs = report.to_dict()["manifests"][0]["variants"]
    assert [(v["so_blob_key"], v["target_sm"], v["ptx_compute"]) for v in vs] == \
        [("lib_sm90", 90, 0), ("lib_ptx", 80, 80)]


def test_fqn3_format(tmp_path):
    _, _, report, _ = written(tmp_path, {"a": np.ones((2, 2), np.float32)},
                              format="ETCUDAFQN3")
    assert report.to_dict()["manifests"][0]["format"] == "ETCUDAFQN3"


def test_container_only(tmp_path):
    p = tmp_path / "w.ptd"
    ptd.write(p, None, {"a": np.ones(3, np.float32)})
    assert ptd.verify(p).ok and list(tmp_path.iterdir()) == [p]
    assert ptd.load(p, device="host")["cuda_fqn_weight:cuda:a"] == np.ones(3, np.float32).tobytes()


@pytest.mark.parametrize("call, exc", [
    (lambda p: ptd.write(p, None, [("a", np.ones(2))]), TypeError),
    (lambda p: ptd.write(p, None, {"a": np.ones(2)}, format="ETCUDAFQN9"), ValueError),
    (lambda p: ptd.write(p, None, {1: np.ones(2)}), TypeError),
    (lambda p: ptd.write(p, None, {"a": "not an array"}), TypeError),
    (lambda p: ptd.write(p, None, {"a": np.ones(4)[::-1]}), ValueError),
    (lambda p: ptd.Weight(b"1234", dtype="float33", sizes=(1,), strides=(1,)), ValueError),
    (lambda p: ptd.Weight(b"1234", dtype=99, sizes=(1,), strides=(1,)), ValueError),
    (lambda p: ptd.Weight(b"1234", dtype="float32", sizes=(1,), strides=(1, 1)), ValueError),
    (lambda p: ptd.Weight(42, dtype="float32", sizes=(1,), strides=(1,)), TypeError),
    (lambda p: ptd.Weight(b"1234", dtype="float32", sizes=(1,), strides=(1,), device="tpu"),
     ValueError),
    (lambda p: ptd.Weight(b"1234", dtype="float32", sizes=(1,), strides=(1,), device="cuda:x"),
     ValueError),
    (lambda p: ptd.Weight(b"1234", dtype="float32", sizes=(1,), strides=(1,), device="CPU"),
     ValueError),
    (lambda p: ptd.Weight(b"1234", dtype="float32", sizes=(1,), strides=(1,), device=0),
     TypeError),
    (lambda p: ptd.write(p, None, {"a": ptd.Weight(b"1234", dtype="float32", sizes=(1,),
                                                   strides=(-1,))}), ValueError),
])
def test_bad_arguments(tmp_path, call, exc):
    with pytest.raises(exc):
        call(tmp_path / "w.ptd")
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_directory_is_oserror(tmp_path):
    with pytest.raises(OSError):
        ptd.write(tmp_path / "no" / "w.ptd", None, {"a": np.ones(2, np.float32)})


def test_runtime_owned_placeholder_w4(tmp_path):
    """W4: an off-graph KV buffer, declared with a 0-byte storage, beside a
    compact clone: no bytes in the .ptd, storage_nbytes from its view, and
    listed (not loaded) by ptd.load."""
    big = np.arange(32, dtype=np.float32).reshape(8, 4)
    rows = ptd.Weight.from_array(
        big[2:5], ptd.TensorProperties((3, 4), (4, 1), offset=8, storage_size=128))
    kv = ptd.Weight(b"", dtype="bfloat16", sizes=(1, 8, 2, 4), strides=(64, 8, 4, 1),
                    properties=ptd.TensorProperties((1, 8, 2, 4), (64, 8, 4, 1), offset=0))
    p, m, report, e = written(tmp_path, {"rows": rows, "__et_offgraph_kv_layer_0_k": kv})
    w = e["__et_offgraph_kv_layer_0_k"]
    assert w["runtime_owned"] is True and w["sha256"] is None
    assert (w["storage_nbytes"], w["required_nbytes"]) == (128, 128)
    assert e["rows"]["runtime_owned"] is False
    keys = [n["key"] for n in report.to_dict()["ptd"]["named_data"]]
    assert keys == ["cuda_fqn_weight:cuda:rows"]
    loaded = ptd.load(p, manifest=m, device="host")
    assert list(loaded) == ["rows"]
    assert [r.fqn for r in loaded.runtime_owned] == ["__et_offgraph_kv_layer_0_k"]
