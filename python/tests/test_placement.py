"""ptd.load's device_budget and host_fqns, Tensor.residency, Weights.placement.
Without a GPU only the host behaviour and the argument checks run; the
placement itself runs where a CUDA device opens."""
import numpy as np
import pytest

import ptd
from conftest import CASES, case_args

K01 = next(c for c in CASES if c["name"] == "k01_view_geometry")
RESIDENCIES = {"device", "mapped_host", "host"}


def k01_args():
    ptd_path, manifest, _ = case_args(K01)
    return ptd_path, dict(manifest=manifest)


def test_host_load_is_all_host():
    ptd_path, kw = k01_args()
    w = ptd.load(ptd_path, device="host", **kw)
    assert {w[n].residency for n in w} == {"host"}
    assert set(w.placement) == RESIDENCIES
    assert w.placement["host"] == {"storages": w.stats["storages"], "bytes": w.stats["bytes"]}
    assert w.placement["device"] == {"storages": 0, "bytes": 0}
    assert w.placement["mapped_host"] == {"storages": 0, "bytes": 0}


def test_mapped_file_is_host_residency(tmp_path):
    # map_file's file mappings are plain host memory, not "mapped_host".
    ptd.write(tmp_path / "m.ptd", tmp_path / "m.manifest", {"w": np.arange(64, dtype=np.float32)})
    w = ptd.load(tmp_path / "m.ptd", manifest=tmp_path / "m.manifest", device="host",
                 map_file=True)
    assert w.stats["mapped"] == 1
    assert w["w"].residency == "host"
    assert w.placement["host"]["storages"] == 1


def test_residency_survives_view_as():
    ptd_path, kw = k01_args()
    w = ptd.load(ptd_path, device="host", **kw)
    t = next(w[n] for n in w if w[n].dtype == "bfloat16")
    assert t.view_as("uint16").residency == t.residency == "host"


@pytest.mark.parametrize("kwargs, name", [
    (dict(device_budget=0), "device_budget"),
    (dict(device_budget=1 << 30), "device_budget"),
    (dict(device_budget="48M"), "device_budget"),
    (dict(host_fqns=["layers.*"]), "host_fqns"),
    (dict(host_fqns=("nothing.matches",)), "host_fqns"),
    (dict(device_budget=0, host_fqns=["layers.*"]), "device_budget"),
])
def test_placement_on_the_host_device_is_a_value_error(kwargs, name):
    ptd_path, kw = k01_args()
    with pytest.raises(ValueError, match=rf"^{name} applies to a CUDA device; device=\"host\""):
        ptd.load(ptd_path, device="host", **kw, **kwargs)


def test_empty_host_fqns_and_no_budget_are_a_plain_load():
    ptd_path, kw = k01_args()
    w = ptd.load(ptd_path, device="host", device_budget=None, host_fqns=[], **kw)
    assert w.placement["host"]["storages"] == w.stats["storages"]


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(device_budget=1.5), TypeError, "device_budget must be an int"),
    (dict(device_budget=True), TypeError, "device_budget must be an int"),
    (dict(device_budget=b"1G"), TypeError, "device_budget must be an int"),
    (dict(device_budget=[1]), TypeError, "device_budget must be an int"),
    (dict(device_budget=-1), ValueError, "device_budget must be in"),
    (dict(device_budget=2**64), ValueError, "device_budget must be in"),
    (dict(device_budget=""), ValueError, "byte count"),
    (dict(device_budget="48X"), ValueError, "byte count"),
    (dict(device_budget="-1M"), ValueError, "byte count"),
    (dict(device_budget="1.5G"), ValueError, "byte count"),
    (dict(device_budget="M"), ValueError, "byte count"),
    (dict(device_budget="16777216T"), ValueError, "device_budget must be in"),
    (dict(host_fqns="layers.*"), TypeError, "host_fqns must be an iterable of str"),
    (dict(host_fqns=b"layers.*"), TypeError, "host_fqns must be an iterable of str"),
    (dict(host_fqns=[1]), TypeError, "host_fqns must be an iterable of str"),
    (dict(host_fqns=5), TypeError, "host_fqns must be an iterable of str"),
])
def test_bad_placement_arguments(kwargs, exc, match):
    ptd_path, kw = k01_args()
    with pytest.raises(exc, match=match):
        ptd.load(ptd_path, device="host", **kw, **kwargs)


def test_byte_sizes():
    assert ptd._byte_size("0", "b") == 0
    assert ptd._byte_size("123", "b") == 123
    assert ptd._byte_size("1k", "b") == 1024
    assert ptd._byte_size("48M", "b") == 48 << 20
    assert ptd._byte_size("2G", "b") == 2 << 30
    assert ptd._byte_size("1T", "b") == 1 << 40
    assert ptd._byte_size(np.int64(7), "b") == 7
    assert ptd._byte_size(2**64 - 1, "b") == 2**64 - 1


# ---- on a GPU -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_k01():
    if not ptd._ptd.has_cuda:
        pytest.skip("built without CUDA")
    ptd_path, kw = k01_args()
    try:
        ptd.load(ptd_path, device="cuda", **kw)
    except RuntimeError as e:
        pytest.skip(f"no CUDA device: {e}")
    return ptd_path, kw


def storages(w):
    """residency of each storage key."""
    return {w[n].storage_key: w[n].residency for n in w}


def check_placement(w):
    p = w.placement
    assert sum(v["storages"] for v in p.values()) == w.stats["storages"]
    assert sum(v["bytes"] for v in p.values()) == w.stats["bytes"]
    for n in w:
        assert w[n].residency in RESIDENCIES


def test_cuda_device_names(cuda_k01):
    """The short name is the device vocabulary; the description names the GPU."""
    ptd_path, kw = cuda_k01
    w = ptd.load(ptd_path, device="cuda", **kw)
    assert w.device == "cuda:0"
    assert w.device_description.startswith("cuda:0 (")
    assert {w[n].device for n in w} <= {"cuda:0", "host"}
    assert repr(w) == f"ptd.Weights({len(w)} entries on cuda:0)"


def test_cuda_default_is_on_the_device(cuda_k01):
    ptd_path, kw = cuda_k01
    w = ptd.load(ptd_path, device="cuda", **kw)
    check_placement(w)
    assert w.placement["mapped_host"]["storages"] == 0
    for n in w:
        # CPU weights (device_type 0) stay in plain host memory.
        assert w[n].residency == ("device" if w[n].device.startswith("cuda") else "host"), n


def test_cuda_zero_budget_is_all_mapped(cuda_k01):
    ptd_path, kw = cuda_k01
    w = ptd.load(ptd_path, device="cuda", device_budget=0, **kw)
    check_placement(w)
    assert w.placement["device"] == {"storages": 0, "bytes": 0}
    assert {w[n].residency for n in w if w[n].device.startswith("cuda")} == {"mapped_host"}


def test_cuda_host_fqns(cuda_k01):
    ptd_path, kw = cuda_k01
    w = ptd.load(ptd_path, device="cuda", host_fqns=["lm_head.*"], **kw)
    check_placement(w)
    assert w["lm_head.weight"].residency == "mapped_host"
    assert w["layers.0.attn.q"].residency == "device"
    assert w.placement["mapped_host"]["storages"] >= 1


def test_cuda_budget_string_and_int_agree(cuda_k01):
    ptd_path, kw = cuda_k01
    a = ptd.load(ptd_path, device="cuda", device_budget="1K", **kw)
    b = ptd.load(ptd_path, device="cuda", device_budget=1024, **kw)
    check_placement(a)
    assert a.placement == b.placement
    assert storages(a) == storages(b)
