"""ptd.extract (docs/SPEC.md section 7): the files it writes read with the
real `safetensors` package, the format's reference implementation, and hold
what ptd.load's views show."""
import hashlib
import json
import re

import numpy as np
import pytest

import ptd
from conftest import CASES, case_args
from st_util import (SCALAR_TO_ST, bf16_weights, load_file, plain_weights, read_header,
                     read_raw, safetensors, save_raw, view_array, view_bytes, write_model)

OK_CUDA = [c for c in CASES if c["kind"] == "cuda" and c["expect"] == "ok"]
REJECT = [c for c in CASES if c["expect"] == "reject" and not c.get("via")]
K01 = next(c for c in CASES if c["name"] == "k01_view_geometry")


@pytest.fixture
def plain(tmp_path):
    p, m = write_model(tmp_path / "plain", plain_weights())
    return p, m, ptd.load(p, manifest=m, device="host")


@pytest.fixture
def with_bf16(tmp_path):
    p, m = write_model(tmp_path / "bf16", bf16_weights())
    return p, m, ptd.load(p, manifest=m, device="host")


def test_extract_loads_with_safetensors_numpy(tmp_path, plain):
    p, m, loaded = plain
    out = tmp_path / "model.safetensors"
    names = ptd.extract(p, out, manifest=m)
    assert names == list(loaded)  # Every stored weight, in manifest order.
    tensors = load_file(out)
    assert sorted(tensors) == sorted(names)
    for n in names:
        want = view_array(loaded[n])
        assert tensors[n].dtype == want.dtype, n
        assert tensors[n].shape == want.shape, n
        np.testing.assert_array_equal(tensors[n], want, err_msg=n)
    # Tied and fused weights are each written whole under their own fqn.
    np.testing.assert_array_equal(tensors["tok_embeddings.weight"], tensors["output.weight"])


def test_extract_bf16_by_raw_bytes(tmp_path, with_bf16):
    """NumPy has no bfloat16: load_file refuses BF16, so BF16 tensors are
    compared by raw bytes (safetensors.deserialize) and the rest through
    safe_open(framework="np")."""
    p, m, loaded = with_bf16
    out = tmp_path / "model.safetensors"
    names = ptd.extract(str(p), str(out), manifest=str(m))
    assert names == list(loaded)
    raw = read_raw(out)
    assert sorted(raw) == sorted(names)
    for n in names:
        t = loaded[n]
        dtype, shape, data = raw[n]
        assert dtype == SCALAR_TO_ST[t.scalar_type], n
        assert shape == list(t.shape), n
        assert data == view_bytes(t), n
    assert raw["lm_head.weight"][0] == "BF16"
    with safetensors.safe_open(str(out), framework="np") as f:
        assert sorted(f.keys()) == sorted(names)
        for n in names:
            if raw[n][0] != "BF16":
                np.testing.assert_array_equal(f.get_tensor(n), view_array(loaded[n]))


def test_extract_is_laid_out_as_the_reference_writer(tmp_path, with_bf16):
    """The same tensors and metadata written by safetensors itself: the same
    tensor order and data_offsets, the same data buffer, the header padded
    with spaces to a multiple of 8."""
    p, m, _ = with_bf16
    ours = tmp_path / "ours.safetensors"
    ptd.extract(p, ours, manifest=m)
    n, header, raw_header = read_header(ours)
    assert n % 8 == 0
    assert raw_header == raw_header.rstrip(b" ") + b" " * (n - len(raw_header.rstrip(b" ")))
    metadata = header.get("__metadata__")
    assert metadata and all(isinstance(v, str) for v in metadata.values())
    # __metadata__ names each source file and its sha256.
    assert any(p.name in v for v in metadata.values()) or any(p.name in k for k in metadata)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    assert any(digest in v for v in metadata.values())

    ref = tmp_path / "ref.safetensors"
    save_raw({k: (d, s, b) for k, (d, s, b) in read_raw(ours).items()}, ref, metadata=metadata)
    rn, ref_header, _ = read_header(ref)
    entries = lambda h: sorted(((v["data_offsets"], k, v["dtype"], v["shape"])  # noqa: E731
                                for k, v in h.items() if k != "__metadata__"))
    assert entries(header) == entries(ref_header)
    assert ours.read_bytes()[8 + n:] == ref.read_bytes()[8 + rn:]


def test_extract_sharded(tmp_path, plain):
    p, m, loaded = plain
    out = tmp_path / "shards"
    limit = 200
    names = ptd.extract(p, out, manifest=m, max_shard_size=limit)
    assert names == list(loaded)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    weight_map = index["weight_map"]
    assert sorted(weight_map) == sorted(names)
    shards = sorted(set(weight_map.values()))
    assert len(shards) > 1
    for i, f in enumerate(shards, 1):
        assert f == f"model-{i:05d}-of-{len(shards):05d}.safetensors"
    assert sorted(x.name for x in out.iterdir()) == sorted(
        shards + ["model.safetensors.index.json"])
    total = 0
    for f in shards:
        raw = read_raw(out / f)
        assert sorted(raw) == sorted(n for n, s in weight_map.items() if s == f)
        size = sum(len(b) for _, _, b in raw.values())
        assert size <= limit or len(raw) == 1, f  # A larger tensor gets a shard of its own.
        total += size
        for n, (_, _, data) in raw.items():
            assert data == view_bytes(loaded[n]), n
        for n, a in load_file(out / f).items():
            np.testing.assert_array_equal(a, view_array(loaded[n]))
    assert index["metadata"]["total_size"] == total


def test_extract_max_shard_size_as_text(tmp_path, plain):
    p, m, loaded = plain
    out = tmp_path / "shards"
    assert ptd.extract(p, out, manifest=m, max_shard_size="1K") == list(loaded)
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(weight_map.values()) == {"model-00001-of-00001.safetensors"}


@pytest.mark.parametrize("case", OK_CUDA, ids=[c["name"] for c in OK_CUDA])
def test_extract_conformance_digests(tmp_path, case):
    """Each stored weight of an upstream-written file, under its fqn: the
    sha256 of its bytes is the digest cases.json gives for the view's
    elements gathered row-major; runtime-owned entries are left out."""
    ptd_path, manifest, _ = case_args(case)
    out = tmp_path / "x.safetensors"
    names = ptd.extract(ptd_path, out, manifest=manifest)
    stored = [w for w in case["weights"] if w["sha256"] is not None]
    assert names == [w["fqn"] for w in stored]
    raw = read_raw(out)
    assert sorted(raw) == sorted(names)
    for w in stored:
        dtype, shape, data = raw[w["fqn"]]
        assert (dtype, shape) == (SCALAR_TO_ST[w["dtype"]], w["sizes"]), w["fqn"]
        assert hashlib.sha256(data).hexdigest() == w["sha256"], w["fqn"]
    for fqn in case.get("runtime_owned") or []:
        assert fqn not in raw


def test_extract_through_pte(tmp_path):
    ptd_path, _, pte = case_args(K01)
    out = tmp_path / "x.safetensors"
    names = ptd.extract(ptd_path, out, pte=pte)
    assert names == [w["fqn"] for w in K01["weights"]]
    raw = read_raw(out)
    for w in K01["weights"]:
        assert hashlib.sha256(raw[w["fqn"]][2]).hexdigest() == w["sha256"], w["fqn"]


def test_extract_without_manifest_writes_keys_as_u8(tmp_path):
    p = tmp_path / "c.ptd"
    ptd.write(p, None, {"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 3), np.int16)})
    out = tmp_path / "c.safetensors"
    names = ptd.extract(p, out)
    loaded = ptd.load(p, device="host")
    assert sorted(names) == sorted(loaded)
    raw = read_raw(out)
    for key in names:
        assert raw[key] == ("U8", [len(loaded[key])], loaded[key]), key
    np.testing.assert_array_equal(load_file(out)[names[0]],
                                  np.frombuffer(loaded[names[0]], np.uint8))


def test_extract_dtype_without_safetensors_name(tmp_path):
    """complex64 has no safetensors name (SPEC section 7): an error naming
    the weight, and no file."""
    p, m = write_model(tmp_path / "m", {
        "ok.weight": np.ones(3, np.float32),
        "freqs_cis": ptd.Weight(bytes(16), dtype="complex64", sizes=(2,), strides=(1,))})
    out = tmp_path / "x.safetensors"
    with pytest.raises(ValueError, match="freqs_cis"):
        ptd.extract(p, out, manifest=m)
    assert not out.exists()


@pytest.mark.parametrize("case", REJECT, ids=[c["name"] for c in REJECT])
def test_extract_of_a_broken_file_raises_verify_error(tmp_path, case):
    ptd_path, manifest, _ = case_args(case)
    out = tmp_path / "x.safetensors"
    with pytest.raises(ptd.VerifyError) as e:
        ptd.extract(ptd_path, out, manifest=manifest)
    err = e.value.report.errors[0]
    assert err.rule in case["rule_ids"], (err.rule, str(e.value))
    assert str(e.value).endswith(f"({err.rule})")
    assert not e.value.report.ok
    assert list(tmp_path.iterdir()) == []


def test_failed_extract_keeps_the_old_file(tmp_path):
    case = REJECT[0]
    ptd_path, manifest, _ = case_args(case)
    out = tmp_path / "x.safetensors"
    out.write_bytes(b"old")
    with pytest.raises(ptd.VerifyError):
        ptd.extract(ptd_path, out, manifest=manifest)
    assert out.read_bytes() == b"old"
    assert [x.name for x in tmp_path.iterdir()] == ["x.safetensors"]


def test_extract_missing_input_is_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        ptd.extract(tmp_path / "missing.ptd", tmp_path / "x.safetensors")
    ptd_path, _, _ = case_args(K01)
    with pytest.raises(FileNotFoundError):
        ptd.extract(ptd_path, tmp_path / "x.safetensors", manifest=tmp_path / "missing.manifest")
    assert list(tmp_path.iterdir()) == []


def test_extract_into_a_missing_folder_is_oserror(tmp_path, plain):
    p, m, _ = plain
    with pytest.raises(FileNotFoundError):
        ptd.extract(p, tmp_path / "missing" / "x.safetensors", manifest=m)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OSError):
        ptd.extract(p, tmp_path / "file" / "shards", manifest=m, max_shard_size=100)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["file", "plain"]


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(max_shard_size=0), ValueError, "max_shard_size"),
    (dict(max_shard_size="lots"), ValueError, "max_shard_size"),
    (dict(max_shard_size=-1), ValueError, "max_shard_size"),
    (dict(max_shard_size=1.5), TypeError, "max_shard_size"),
    (dict(manifest=3), TypeError, "manifest"),
])
def test_extract_bad_arguments(tmp_path, kwargs, exc, match):
    ptd_path, _, _ = case_args(K01)
    with pytest.raises(exc, match=match):
        ptd.extract(ptd_path, tmp_path / "x.safetensors", **kwargs)
    with pytest.raises(TypeError, match="out"):
        ptd.extract(ptd_path, None)
    assert list(tmp_path.iterdir()) == []


def test_second_thread_runs_during_extract(tmp_path, big_file):
    from test_threads import during

    p, m, weights = big_file
    out = tmp_path / "big.safetensors"
    names, elapsed, ticks = during(lambda: ptd.extract(p, out, manifest=m))
    assert names == list(weights)
    assert ticks > 0, f"no tick in a {elapsed * 1e3:.0f} ms extract: the GIL was held"
    with safetensors.safe_open(str(out), framework="np") as f:
        np.testing.assert_array_equal(f.get_tensor("layers.3.w"), weights["layers.3.w"])


def test_verify_error_names_the_file(tmp_path):
    """The diagnostic's file is the input the message starts with."""
    case = REJECT[0]
    ptd_path, manifest, _ = case_args(case)
    with pytest.raises(ptd.VerifyError) as e:
        ptd.extract(ptd_path, tmp_path / "x.safetensors", manifest=manifest)
    d = e.value.report.errors[0]
    assert re.fullmatch(r"[A-Z][A-Za-z0-9]*[0-9]", d.rule)
    if d.file is not None:
        assert d.file in (ptd_path, manifest)
        assert not d.message.startswith(d.file)
    assert d.to_dict()["code"] in ("DATA_LOSS", "INVALID_ARGUMENT", "UNIMPLEMENTED")
