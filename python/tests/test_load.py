"""ptd.load onto the host: conformance digests through DLPack, strided views,
lifetime, the mapping, VerifyError."""
import ctypes
import gc
import hashlib
import os

import numpy as np
import pytest

import ptd
from conftest import CASES, case_args

OK_CUDA = [c for c in CASES if c["kind"] == "cuda" and c["expect"] == "ok"]
OK_CONTAINER = [c for c in CASES if c["kind"] == "container" and c["expect"] == "ok"]
REJECT = [c for c in CASES if c["expect"] == "reject"]
K01 = next(c for c in CASES if c["name"] == "k01_view_geometry")


def host_array(t):
    """numpy.from_dlpack of a tensor. NumPy has no bfloat16 (its from_dlpack
    refuses kDLBfloat), so bf16 is read through the same view as uint16: the
    same bytes, the same strides, the same zero-copy capsule."""
    if t.dtype == "bfloat16":
        with pytest.raises((BufferError, TypeError, ValueError, RuntimeError), match="dtype"):
            np.from_dlpack(t)
        return np.from_dlpack(t.view_as("uint16"))
    return np.from_dlpack(t)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def k01():
    ptd_path, manifest, _ = case_args(K01)
    return ptd.load(ptd_path, manifest=manifest, device="host")


@pytest.mark.parametrize("case", OK_CUDA, ids=[c["name"] for c in OK_CUDA])
def test_weight_digests_through_dlpack(case):
    ptd_path, manifest, _ = case_args(case)
    weights = ptd.load(ptd_path, manifest=manifest, device="host")
    assert weights.has_manifest
    # Runtime-owned entries (sha256 null in cases.json) are not loaded.
    stored = [w for w in case["weights"] if w["sha256"] is not None]
    assert sorted(weights) == sorted(w["fqn"] for w in stored)
    for expected in stored:
        t = weights[expected["fqn"]]
        assert t.fqn == expected["fqn"]
        assert t.storage_key == expected["storage_key"]
        assert t.scalar_type == expected["dtype"]
        assert t.shape == tuple(expected["sizes"])
        assert t.strides == tuple(expected["strides"])
        assert t.offset == expected["storage_offset"]
        assert t.device == "host"
        assert t.__dlpack_device__() == (1, 0)
        a = host_array(t)
        assert a.shape == tuple(expected["sizes"])
        assert sha(a) == expected["sha256"], expected["fqn"]


@pytest.mark.parametrize("case", OK_CUDA, ids=[c["name"] for c in OK_CUDA])
def test_mapped_load_has_the_same_bytes(case):
    ptd_path, manifest, _ = case_args(case)
    weights = ptd.load(ptd_path, manifest=manifest, device="host", map_file=True)
    stats = weights.stats
    assert stats["mapped"] <= stats["storages"]
    assert stats["allocations"] <= 1
    assert (stats["mapped"] > 0) == (stats["mappings"] > 0)
    for expected in (w for w in case["weights"] if w["sha256"] is not None):
        assert sha(host_array(weights[expected["fqn"]])) == expected["sha256"], expected["fqn"]


def test_a_mapped_load_reads_nothing(tmp_path):
    ptd_path, manifest = str(tmp_path / "m.ptd"), str(tmp_path / "m.manifest")
    data = np.arange(1024, dtype=np.float32)
    ptd.write(ptd_path, manifest, {"w": data})
    weights = ptd.load(ptd_path, manifest=manifest, device="host", map_file=True)
    assert weights.stats["mapped"] == 1 and weights.stats["mappings"] == 1
    assert weights.stats["reads"] == 0 and weights.stats["allocations"] == 0
    assert weights.stats["mapped_bytes"] == data.nbytes
    np.testing.assert_array_equal(np.from_dlpack(weights["w"]), data)


def test_storages_off_the_host_alignment_are_read_not_mapped(tmp_path):
    ptd_path, manifest = str(tmp_path / "m.ptd"), str(tmp_path / "m.manifest")
    # 48 bytes each, 16-aligned: one storage in four sits at a 64-byte offset.
    arrays = {f"w{i}": np.full(12, i, dtype=np.float32) for i in range(8)}
    ptd.write(ptd_path, manifest, arrays, segment_alignment=16)
    weights = ptd.load(ptd_path, manifest=manifest, device="host", map_file=True)
    stats = weights.stats
    assert 0 < stats["mapped"] < stats["storages"] == 8
    assert stats["reads"] > 0
    for name, want in arrays.items():
        np.testing.assert_array_equal(np.from_dlpack(weights[name]), want)


def _evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_io_engines_give_the_same_bytes_and_say_which_ran(tmp_path):
    ptd_path, manifest = str(tmp_path / "m.ptd"), str(tmp_path / "m.manifest")
    arrays = {f"w{i}": np.arange(i * 1000, i * 1000 + 3000 + i, dtype=np.float32)
              for i in range(40)}
    ptd.write(ptd_path, manifest, arrays)
    for io in ("buffered", "direct", "auto", "gds"):
        _evict(ptd_path)
        weights = ptd.load(ptd_path, manifest=manifest, device="host", io=io)
        rep = weights.io
        assert rep["requested"] == io
        assert set(rep["engines"]) == {"buffered", "direct", "gds"}
        assert sum(rep["engines"].values()) >= weights.stats["bytes"]
        if io == "buffered":
            assert rep["engines"]["direct"] == 0 and rep["fallbacks"] == []
        if io == "gds":  # The host device has no GPU memory: direct.
            assert rep["fallbacks"][0]["from"] == "gds"
            assert rep["fallbacks"][0]["to"] == "direct"
        if io == "direct" and not rep["fallbacks"]:
            assert rep["engines"]["direct"] > 0 and rep["engines"]["buffered"] == 0
        for name, want in arrays.items():
            np.testing.assert_array_equal(np.from_dlpack(weights[name]), want)
    with pytest.raises(ValueError, match="io must be"):
        ptd.load(ptd_path, manifest=manifest, device="host", io="fast")
    with pytest.raises(TypeError, match="io must be a str"):
        ptd.load(ptd_path, manifest=manifest, device="host", io=1)


@pytest.mark.parametrize("case", [c for c in OK_CUDA if c.get("pte")],
                         ids=[c["name"] for c in OK_CUDA if c.get("pte")])
def test_through_pte(case):
    ptd_path, _, pte = case_args(case)
    weights = ptd.load(ptd_path, pte=pte, device="host", sm=90)
    for expected in (w for w in case["weights"] if w["sha256"] is not None):
        assert sha(host_array(weights[expected["fqn"]])) == expected["sha256"]


@pytest.mark.parametrize("case", OK_CONTAINER, ids=[c["name"] for c in OK_CONTAINER])
def test_container_keys_to_bytes(case):
    weights = ptd.load(case_args(case)[0], device="host")
    assert not weights.has_manifest
    assert sorted(weights) == sorted(n["key"] for n in case["named_data"])
    for n in case["named_data"]:
        b = weights[n["key"]]
        assert isinstance(b, bytes) and len(b) == n["size"]
        assert hashlib.sha256(b).hexdigest() == n["sha256"]


def test_bf16_is_dlpack_bfloat(k01):
    """The capsule's DLTensor says kDLBfloat (code 4), 16 bits."""

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    t = k01["lm_head.weight"]
    assert t.dtype == "bfloat16" and t.scalar_type == 15
    capsule = t.__dlpack__()
    dl = DLTensor.from_address(get(capsule, b"dltensor"))
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (4, 16, 1)
    assert dl.ndim == 2 and [dl.shape[i] for i in range(2)] == list(t.shape)
    assert [dl.strides[i] for i in range(2)] == list(t.strides)
    # The versioned capsule (DLPack 1.x) too.
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))


def test_transposed_view(k01):
    t = k01["layers.0.mlp.transposed"]
    a = np.from_dlpack(t)
    assert a.shape == (4, 8) and a.strides == (4, 16)  # Element strides (1, 4).
    assert not a.flags.c_contiguous and a.flags.f_contiguous


def test_broadcast_view(k01):
    t = k01["rope.expanded"]
    a = np.from_dlpack(t)
    assert t.strides == (0, 1) and a.strides == (0, 4)
    assert (a == a[0]).all()


def test_offset_views_share_one_storage(k01):
    # q, k and v have keys of their own, which name one stored segment: each
    # key gets its own memory unless share_segments asks for one copy.
    ptd_path, manifest, _ = case_args(K01)
    q, k = (np.from_dlpack(k01[f"layers.0.attn.{n}"]) for n in "qk")
    assert not np.shares_memory(q, k)
    shared = ptd.load(ptd_path, manifest=manifest, device="host", share_segments=True)
    q, k, v = (np.from_dlpack(shared[f"layers.0.attn.{n}"]) for n in "qkv")
    base = q.__array_interface__["data"][0]
    assert k.__array_interface__["data"][0] - base == 16 * 4
    assert v.__array_interface__["data"][0] - base == 32 * 4
    assert k01["layers.0.attn.k"].storage_key == "cuda_fqn_weight:cuda:layers.0.attn.k"
    assert np.shares_memory(q, np.from_dlpack(shared["layers.0.attn.q"]))


def test_zero_dim_and_empty(k01):
    s = np.from_dlpack(k01["layers.0.norm.scale"])
    assert s.shape == () and k01["layers.0.norm.scale"].offset == 3
    e = np.from_dlpack(k01["layers.0.empty"])
    assert e.shape == (0, 4)


def test_views_are_read_only(k01):
    a = np.from_dlpack(k01["layers.0.attn.q"])
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0] = 1


def test_lifetime_tensor_outlives_weights():
    ptd_path, manifest, _ = case_args(K01)
    expected = {w["fqn"]: w["sha256"] for w in K01["weights"]}
    weights = ptd.load(ptd_path, manifest=manifest, device="host")
    t = weights["layers.0.attn.k"]
    arr = np.from_dlpack(weights["layers.0.attn.v"])
    del weights
    gc.collect()
    assert sha(np.from_dlpack(t)) == expected["layers.0.attn.k"]
    del t
    gc.collect()
    assert sha(arr) == expected["layers.0.attn.v"]


def test_mapping_is_read_only(k01):
    assert len(k01) == len(K01["weights"])
    assert "layers.0.attn.q" in k01 and "nope" not in k01
    with pytest.raises(KeyError):
        k01["nope"]
    with pytest.raises(KeyError):
        k01[0]
    with pytest.raises(TypeError):
        k01["layers.0.attn.q"] = 1
    assert k01.get("nope") is None
    assert [k for k, _ in k01.items()] == list(k01)


def test_subset_by_fqn():
    ptd_path, manifest, _ = case_args(K01)
    w = ptd.load(ptd_path, manifest=manifest, device="host", fqns=["layers.0.attn.k"])
    assert list(w) == ["layers.0.attn.k"]
    assert w.stats["weights"] == 1 and w.stats["storages"] == 1


def test_timings_and_stats(k01):
    assert set(k01.timings) >= {"verify_s", "plan_s", "allocate_s", "read_s", "total_s"}
    assert all(v >= 0 for v in k01.timings.values())
    # ptd.load verifies once, before the load: its timings count it, as ptd-load's do.
    t = k01.timings
    assert t["verify_s"] > 0
    assert t["verify_s"] <= t["first_weight_s"] <= t["total_s"]
    s = k01.stats
    assert s["weights"] == len(K01["weights"])
    # One storage per storage key (q, k and v's keys name one segment, and
    # still get one each: share_segments is off).
    named = ptd.verify(case_args(K01)[0]).to_dict()["ptd"]["named_data"]
    keys = {w["storage_key"] for w in K01["weights"] if w["sha256"] is not None}
    sizes = {n["key"]: n["size"] for n in named if n["key"] in keys}
    assert s["storages"] == len(sizes) == len(keys)
    assert s["bytes"] == sum(sizes.values())
    assert k01.device == "host"
    assert k01.device_description == "host"
    assert repr(k01) == f"ptd.Weights({len(k01)} entries on host)"


@pytest.mark.parametrize("device", ["host", "cpu"])
def test_cpu_is_an_alias_of_host(device):
    """One device vocabulary: "cpu" opens the host device, and every output
    says "host"."""
    ptd_path, manifest, _ = case_args(K01)
    weights = ptd.load(ptd_path, manifest=manifest, device=device)
    assert weights.device == "host"
    assert weights.device_description == "host"
    for name in weights:
        t = weights[name]
        assert t.device == "host", name
        assert t.__dlpack_device__() == (1, 0)
        assert repr(t).endswith(", host)")


def test_auto_device_without_gpu_is_host():
    if ptd._ptd.has_cuda:
        pytest.skip("built with CUDA: auto may pick a GPU")
    ptd_path, manifest, _ = case_args(K01)
    weights = ptd.load(ptd_path, manifest=manifest)
    assert weights.device == "host"
    assert weights.device_description == "host"


def test_runtime_owned_empty_without_such_entries(k01):
    assert k01.runtime_owned == ()


@pytest.mark.parametrize("case", REJECT, ids=[c["name"] for c in REJECT])
def test_rule_broken_raises_verify_error(case):
    ptd_path, manifest, _ = case_args(case)
    with pytest.raises(ptd.VerifyError) as info:
        ptd.load(ptd_path, manifest=manifest, device="host")
    assert isinstance(info.value, ValueError)
    report = info.value.report
    assert not report.ok
    assert {e.rule for e in report.errors} & set(case["rule_ids"])
    # The first error's rule, without parsing "(X1)" out of the message.
    assert info.value.rule == report.errors[0].rule
    assert report.to_dict() == ptd.verify(ptd_path, manifest=manifest).to_dict()
    assert report.errors[0].message in str(info.value)


def test_torch_from_dlpack():
    torch = pytest.importorskip("torch")
    ptd_path, manifest, _ = case_args(K01)
    weights = ptd.load(ptd_path, manifest=manifest, device="host")
    for expected in K01["weights"]:
        t = torch.from_dlpack(weights[expected["fqn"]])
        assert tuple(t.shape) == tuple(expected["sizes"])
        assert tuple(t.stride()) == tuple(expected["strides"])
        b = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        assert hashlib.sha256(b).hexdigest() == expected["sha256"]


def test_runtime_owned_entries_are_listed_not_loaded():
    """Runtime-owned entries (the off-graph KV cache) have no stored bytes:
    listed with their geometry, absent from the mapping."""
    for case in CASES:
        if case["expect"] != "ok" or not case.get("runtime_owned"):
            continue
        ptd_path, manifest, _ = case_args(case)
        weights = ptd.load(ptd_path, manifest=manifest, device="host")
        owned = {r.fqn: r for r in weights.runtime_owned}
        assert set(owned) == set(case["runtime_owned"]), case["name"]
        assert weights.stats["runtime_owned"] == len(owned)
        for want in case["weights"]:
            if want["fqn"] in owned:
                r = owned[want["fqn"]]
                assert want["fqn"] not in weights
                assert r.shape == tuple(want["sizes"])
                assert r.strides == tuple(want["strides"])
                assert r.offset == want["storage_offset"]
                assert r.required_nbytes == want["required_nbytes"]
                assert r.storage_key == want["storage_key"]
            else:
                assert want["fqn"] in weights
        assert len(weights) + len(owned) == len(case["weights"])


def test_fqns_naming_a_runtime_owned_entry_is_an_error():
    case = next(c for c in CASES if c["name"] == "k04_offgraph_kv_not_stored")
    ptd_path, manifest, _ = case_args(case)
    with pytest.raises((ValueError, KeyError)) as e:
        ptd.load(ptd_path, manifest=manifest, device="host",
                 fqns=["__et_offgraph_kv_layer_0_k"])
    assert "runtime-owned" in str(e.value)


def test_keys_on_one_segment_get_their_own_memory_unless_shared():
    case = next(c for c in CASES if c["name"] == "c01_layouts_and_shared_segment")
    ptd_path, _, _ = case_args(case)
    keys = [nd["key"] for nd in case["named_data"]]
    own = ptd.load(ptd_path, device="host")
    shared = ptd.load(ptd_path, device="host", share_segments=True)
    assert own.stats["storages"] == len(keys)
    assert shared.stats["storages"] < len(keys)
    for k in keys:
        assert bytes(own[k]) == bytes(shared[k])
    with pytest.raises(TypeError, match="share_segments must be a bool"):
        ptd.load(ptd_path, device="host", share_segments=1)
