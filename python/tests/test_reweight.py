"""ptd.reweight (docs/SPEC.md section 7, S1-S10): checkpoints written by the
real `safetensors` package, single and sharded, become .ptd files whose
views show their tensors; extract then reweight gives the .ptd back byte for
byte; every broken rule is a VerifyError naming it, and leaves no file."""
import json
import pathlib
import struct

import numpy as np
import pytest

import ptd
from conftest import CASES, case_args
from st_util import (bf16_weights, checkpoint_of, load_file, plain_weights, save_file, save_raw,
                     uncovered_bytes, view_array, write_index, write_model)

OK_CUDA = [c for c in CASES if c["kind"] == "cuda" and c["expect"] == "ok"]
K01 = next(c for c in CASES if c["name"] == "k01_view_geometry")
K02 = next(c for c in CASES if c["name"] == "k02_one_storage_key_many_views")


@pytest.fixture
def plain(tmp_path):
    p, m = write_model(tmp_path / "plain", plain_weights())
    return p, m, ptd.load(p, manifest=m, device="host")


def changed(ckpt):
    """A fine-tuned checkpoint: every tensor changed, tied ones alike."""
    new = {}
    for n, a in ckpt.items():
        if a.dtype == np.bool_:
            new[n] = ~a
        elif a.dtype.kind == "f":
            new[n] = (a * 2 + 1).astype(a.dtype)
        else:
            new[n] = (a * 3 - 1).astype(a.dtype)
    return new


def assert_loads(out, manifest, tensors):
    """ptd.load of `out` shows `tensors` (a dict of arrays) for their fqns."""
    assert ptd.verify(out, manifest=manifest).ok
    loaded = ptd.load(out, manifest=manifest, device="host")
    for n, a in tensors.items():
        np.testing.assert_array_equal(view_array(loaded[n]), a, err_msg=n)
    return loaded


def raises_rule(rule, fn):
    with pytest.raises(ptd.VerifyError) as e:
        fn()
    err = e.value.report.errors[0]
    assert err.rule == rule, str(e.value)
    assert str(e.value).endswith(f"({rule})")
    assert not e.value.report.ok
    return str(e.value)


def entries(folder):
    return sorted(x.name for x in pathlib.Path(folder).iterdir())


# ---- checkpoints written by safetensors.numpy ------------------------------------------


def test_reads_a_save_file_checkpoint(tmp_path, plain):
    p, m, loaded = plain
    new = changed(checkpoint_of(loaded))
    ckpt = tmp_path / "ft.safetensors"
    save_file(new, str(ckpt))
    out = tmp_path / "ft.ptd"
    r = ptd.reweight(ckpt, out, manifest=m)
    assert isinstance(r, ptd.ReweightReport) and r.ok and bool(r)
    assert sorted(r.written) == sorted(loaded) and r.kept == () and r.unused == ()
    assert r.errors == ()
    # The strided clone's gaps, and the rest of each of q, k and v's 192-byte
    # storages: no view covers them, no base supplies them.
    gaps = uncovered_bytes(loaded)
    assert gaps == (232 - 16 * 4) + 3 * (192 - 64)
    assert r.zero_filled_bytes == gaps
    assert sum(z[2] for z in r.zero_filled) == gaps
    assert r.warnings, "zero-filled bytes are a warning"
    assert r.to_dict()["ok"] is True
    assert "ReweightReport(ok=True" in repr(r)
    assert_loads(out, m, new)


def test_reads_a_sharded_checkpoint(tmp_path, plain):
    """Two shards written by save_file and the index Hugging Face writes:
    the same .ptd as from one file."""
    p, m, loaded = plain
    new = changed(checkpoint_of(loaded))
    names = sorted(new)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    halves = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for f, ns in halves.items():
        save_file({n: new[n] for n in ns}, str(folder / f))
    index = write_index(folder, {n: f for f, ns in halves.items() for n in ns})

    out = tmp_path / "sharded.ptd"
    r = ptd.reweight(index, out, manifest=m)
    assert sorted(r.written) == names and r.unused == ()
    assert_loads(out, m, new)

    single = tmp_path / "single.safetensors"
    save_file(new, str(single))
    ptd.reweight(str(single), str(tmp_path / "single.ptd"), manifest=str(m))
    assert out.read_bytes() == (tmp_path / "single.ptd").read_bytes()


def test_changed_checkpoint_with_base(tmp_path, plain):
    """extract, change some tensors with NumPy, save_file, reweight: ptd.load
    shows the new values; the bytes no view covers come from the base."""
    p, m, loaded = plain
    x = tmp_path / "x.safetensors"
    ptd.extract(p, x, manifest=m)
    ckpt = {n: a.copy() for n, a in load_file(x).items()}
    ckpt["layers.0.attn.k"] += 1
    ckpt["tok_embeddings.weight"][3] = -7
    ckpt["output.weight"][3] = -7
    ckpt["layers.0.attn.cols"] *= -1
    save_file(ckpt, str(x))
    out = tmp_path / "new.ptd"
    r = ptd.reweight(x, out, manifest=m, base=p)
    assert r.ok and r.zero_filled_bytes == 0 and r.kept == ()
    new = assert_loads(out, m, ckpt)
    np.testing.assert_array_equal(view_array(new["layers.0.attn.q"]),
                                  view_array(loaded["layers.0.attn.q"]))
    # The clone's gaps (the columns it was cut from) are the base's bytes.
    old_cols, new_cols = loaded["layers.0.attn.cols"], new["layers.0.attn.cols"]
    key = old_cols.storage_key
    old_bytes = ptd.load(p, device="host")[key]
    new_bytes = ptd.load(out, device="host")[key]
    assert len(new_bytes) == len(old_bytes) == old_cols.storage_nbytes
    gaps = np.ones(len(old_bytes) // 4, bool)
    gaps[[r * 8 + c for r in range(8) for c in range(2)]] = False
    as_f32 = lambda b: np.frombuffer(b, np.float32)  # noqa: E731
    np.testing.assert_array_equal(as_f32(new_bytes)[gaps], as_f32(old_bytes)[gaps])
    np.testing.assert_array_equal(view_array(new_cols), -view_array(old_cols))


# ---- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("model", ["plain", "bf16"])
@pytest.mark.parametrize("sharded", [False, True], ids=["file", "sharded"])
def test_extract_then_reweight_is_byte_identical(tmp_path, model, sharded):
    weights = plain_weights() if model == "plain" else bf16_weights()
    p, m = write_model(tmp_path / "model", weights)
    if sharded:
        x = tmp_path / "shards"
        ptd.extract(p, x, manifest=m, max_shard_size=100)
        ckpt = x / "model.safetensors.index.json"
    else:
        ckpt = tmp_path / "x.safetensors"
        ptd.extract(p, ckpt, manifest=m)
    out = tmp_path / "out.ptd"
    r = ptd.reweight(ckpt, out, manifest=m, base=p)
    assert r.ok and r.kept == () and r.unused == () and r.zero_filled_bytes == 0
    assert sorted(r.written) == sorted(ptd.load(p, manifest=m, device="host"))
    assert out.read_bytes() == p.read_bytes()


def test_round_trip_without_a_manifest(tmp_path):
    """Without a manifest, keys travel as U8 tensors; base is required."""
    p = tmp_path / "c.ptd"
    ptd.write(p, None, {"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 3), np.int16)})
    x = tmp_path / "c.safetensors"
    keys = ptd.extract(p, x)
    out = tmp_path / "out.ptd"
    ptd.reweight(x, out, base=p)
    assert out.read_bytes() == p.read_bytes()

    raw = load_file(x)
    raw = {k: a.copy() for k, a in raw.items()}
    raw[keys[0]][:4] = [1, 2, 3, 4]
    save_file(raw, str(x))
    r = ptd.reweight(x, out, base=p)
    assert r.ok
    assert ptd.load(out, device="host")[keys[0]] == raw[keys[0]].tobytes()


@pytest.mark.parametrize("case", OK_CUDA, ids=[c["name"] for c in OK_CUDA])
def test_conformance_round_trip(tmp_path, case):
    """Upstream-written files: extract then reweight(base=original) gives a
    file that passes every rule, holds the same bytes under every key, and
    is the original byte for byte."""
    ptd_path, manifest, _ = case_args(case)
    x = tmp_path / "x.safetensors"
    ptd.extract(ptd_path, x, manifest=manifest)
    out = tmp_path / "out.ptd"
    r = ptd.reweight(x, out, manifest=manifest, base=ptd_path)
    stored = [w["fqn"] for w in case["weights"] if w["sha256"] is not None]
    assert sorted(r.written) == sorted(stored) and r.unused == ()
    assert ptd.verify(out, manifest=manifest).ok
    before = ptd.load(ptd_path, manifest=manifest, device="host")
    after = ptd.load(out, manifest=manifest, device="host")
    assert list(after) == list(before)
    old_keys, new_keys = ptd.load(ptd_path, device="host"), ptd.load(out, device="host")
    for fqn in stored:
        key = before[fqn].storage_key
        assert new_keys[key] == old_keys[key], fqn
    assert out.read_bytes() == pathlib.Path(ptd_path).read_bytes()


def test_round_trip_through_pte(tmp_path):
    ptd_path, _, pte = case_args(K01)
    x = tmp_path / "x.safetensors"
    ptd.extract(ptd_path, x, pte=pte)
    out = tmp_path / "out.ptd"
    ptd.reweight(x, out, pte=pte, base=ptd_path)
    old_keys, new_keys = ptd.load(ptd_path, device="host"), ptd.load(out, device="host")
    for w in K01["weights"]:
        assert new_keys[w["storage_key"]] == old_keys[w["storage_key"]], w["fqn"]
    assert out.read_bytes() == pathlib.Path(ptd_path).read_bytes()


# ---- S8-S10 ----------------------------------------------------------------------------


def test_tied_weights_that_differ_s9(tmp_path):
    """k02: q, k, v and qkv_t are views of one storage; qkv_t covers it all,
    so each of q, k and v is tied to a part of qkv_t."""
    ptd_path, manifest, _ = case_args(K02)
    x = tmp_path / "x.safetensors"
    ptd.extract(ptd_path, x, manifest=manifest)
    ckpt = {n: a.copy() for n, a in load_file(x).items()}
    ckpt["layers.0.attn.q"][0, 0] += 1
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    msg = raises_rule("S9", lambda: ptd.reweight(x, out, manifest=manifest))
    assert "layers.0.attn.q" in msg and "layers.0.attn.qkv_t" in msg
    assert not out.exists()
    # With a base too: the checkpoint's tensors still disagree.
    raises_rule("S9", lambda: ptd.reweight(x, out, manifest=manifest, base=ptd_path))
    assert not out.exists()


def test_overlapping_views_that_differ_s9(tmp_path):
    """k02's v is transposed (strides [1, 4]); k[1, 2] is element 22 of the
    storage, qkv_t[5, 2]."""
    ptd_path, manifest, _ = case_args(K02)
    x = tmp_path / "x.safetensors"
    ptd.extract(ptd_path, x, manifest=manifest)
    ckpt = {n: a.copy() for n, a in load_file(x).items()}
    ckpt["layers.0.attn.k"][1, 2] = 1234.5
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    msg = raises_rule("S9", lambda: ptd.reweight(x, out, manifest=manifest))
    assert "layers.0.attn.k" in msg and "layers.0.attn.qkv_t" in msg
    assert not out.exists()
    # Changed alike, they agree.
    ckpt["layers.0.attn.qkv_t"][5, 2] = 1234.5
    save_file(ckpt, str(x))
    r = ptd.reweight(x, out, manifest=manifest)
    assert r.zero_filled_bytes == 0
    assert_loads(out, manifest, ckpt)


def test_views_of_separate_storages_may_differ(tmp_path, plain):
    """tok_embeddings.weight and output.weight were written from one buffer
    but have storage keys of their own: not tied, so they may part."""
    p, m, loaded = plain
    ckpt = checkpoint_of(loaded)
    ckpt["output.weight"][2, 1] += 1
    x = tmp_path / "x.safetensors"
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    ptd.reweight(x, out, manifest=m, base=p)
    assert_loads(out, m, {n: ckpt[n] for n in ("tok_embeddings.weight", "output.weight")})


@pytest.mark.parametrize("mutate", [
    lambda c: c.__setitem__("layers.0.mlp.w1", c["layers.0.mlp.w1"].astype(np.int64)),
    lambda c: c.__setitem__("layers.0.mlp.w1", c["layers.0.mlp.w1"].astype(np.float32)),
    lambda c: c.__setitem__("layers.0.mlp.w1", c["layers.0.mlp.w1"].reshape(5, 3).copy()),
    lambda c: c.__setitem__("layers.0.mlp.w1", c["layers.0.mlp.w1"][:, :4].copy()),
], ids=["int64", "float32", "transposed_shape", "fewer_columns"])
def test_dtype_or_shape_mismatch_s8(tmp_path, plain, mutate):
    p, m, loaded = plain
    ckpt = checkpoint_of(loaded)
    mutate(ckpt)
    x = tmp_path / "x.safetensors"
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    msg = raises_rule("S8", lambda: ptd.reweight(x, out, manifest=m, base=p))
    assert "layers.0.mlp.w1" in msg
    assert not out.exists()
    with pytest.raises(ptd.VerifyError) as e:
        ptd.reweight(x, out, manifest=m, base=p)
    assert e.value.report.errors[0].file == str(x)
    assert e.value.report.errors[0].to_dict()["code"] == "INVALID_ARGUMENT"


def test_missing_weight_s10_and_base(tmp_path, plain):
    p, m, loaded = plain
    ckpt = checkpoint_of(loaded)
    del ckpt["mask"]
    x = tmp_path / "x.safetensors"
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    assert "mask" in raises_rule("S10", lambda: ptd.reweight(x, out, manifest=m))
    assert not out.exists()
    r = ptd.reweight(x, out, manifest=m, base=p)
    assert r.ok and r.kept == ("mask",) and "mask" not in r.written
    assert any("mask" in w.message for w in r.warnings)
    assert_loads(out, m, {"mask": view_array(loaded["mask"])})


def test_unused_tensors_are_warned(tmp_path, plain):
    p, m, loaded = plain
    ckpt = checkpoint_of(loaded)
    ckpt["extra.bias"] = np.zeros(3, np.float32)
    x = tmp_path / "x.safetensors"
    save_file(ckpt, str(x))
    r = ptd.reweight(x, tmp_path / "out.ptd", manifest=m, base=p)
    assert r.ok and r.unused == ("extra.bias",)
    assert any("extra.bias" in w.message for w in r.warnings)


def test_rename(tmp_path, plain):
    p, m, loaded = plain
    ckpt = changed(checkpoint_of(loaded))
    x = tmp_path / "x.safetensors"
    save_file({"base_model.model." + n: a for n, a in ckpt.items()}, str(x))
    out = tmp_path / "out.ptd"
    # Without renaming, no weight finds its tensor.
    raises_rule("S10", lambda: ptd.reweight(x, out, manifest=m))
    assert not out.exists()
    r = ptd.reweight(x, out, manifest=m, rename={"base_model.model.": ""})
    assert sorted(r.written) == sorted(ckpt) and r.unused == ()
    assert_loads(out, m, ckpt)
    # The longest matching prefix wins.
    r = ptd.reweight(x, out, manifest=m,
                     rename={"base_model.": "wrong.", "base_model.model.": ""})
    assert sorted(r.written) == sorted(ckpt)
    # Renaming onto a prefix.
    save_file({n.replace("layers.", "h.", 1): a for n, a in ckpt.items()}, str(x))
    r = ptd.reweight(x, out, manifest=m, rename={"h.": "layers."})
    assert sorted(r.written) == sorted(ckpt)
    assert_loads(out, m, ckpt)


def test_bf16_checkpoint(tmp_path):
    """A BF16 tensor written by safetensors itself (NumPy has no bf16)."""
    p, m = write_model(tmp_path / "m", bf16_weights())
    loaded = ptd.load(p, manifest=m, device="host")
    ckpt = checkpoint_of(loaded)
    tensors = {n: a for n, a in ckpt.items() if n != "lm_head.weight"}
    head = (ckpt["lm_head.weight"] ^ 0x0001).astype(np.uint16)  # Flip the low mantissa bit.
    tensors["lm_head.weight"] = ("BF16", [6, 5], head.tobytes())
    x = tmp_path / "x.safetensors"
    save_raw(tensors, x)
    out = tmp_path / "out.ptd"
    ptd.reweight(x, out, manifest=m, base=p)
    new = ptd.load(out, manifest=m, device="host")["lm_head.weight"]
    assert new.dtype == "bfloat16"
    np.testing.assert_array_equal(view_array(new), head)
    # As U16, the same bytes are another dtype (S8).
    tensors["lm_head.weight"] = head
    save_raw(tensors, x)
    raises_rule("S8", lambda: ptd.reweight(x, out, manifest=m, base=p))


def test_failed_reweight_keeps_the_old_file(tmp_path, plain):
    p, m, loaded = plain
    ckpt = checkpoint_of(loaded)
    ckpt["mask"] = ckpt["mask"].astype(np.uint8)
    x = tmp_path / "x.safetensors"
    save_file(ckpt, str(x))
    out = tmp_path / "out.ptd"
    out.write_bytes(b"old")
    before = entries(tmp_path)
    raises_rule("S8", lambda: ptd.reweight(x, out, manifest=m, base=p))
    assert out.read_bytes() == b"old" and entries(tmp_path) == before


# ---- S1-S7: checkpoints that break the format ----------------------------------------


def st_file(header, data, pad=True):
    """A safetensors file from a header object (or raw header bytes) and data."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


W = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
DATA = np.arange(6, dtype=np.float32).tobytes()

BROKEN_FILES = {
    "S1_shorter_than_8_bytes": (b"\x10\x00", "S1"),
    "S1_header_past_end": (struct.pack("<Q", 4096) + b"{}", "S1"),
    "S2_header_too_large": (struct.pack("<Q", 100_000_001) + b"{}" + bytes(64), "S2"),
    "S3_not_utf8": (st_file(b'{"w\xff":' + json.dumps(W).encode() + b"}", DATA), "S3"),
    "S3_not_json": (st_file(b'{"w": [', DATA), "S3"),
    "S3_not_an_object": (st_file([W], DATA), "S3"),
    "S3_duplicate_name": (st_file(b'{"w":' + json.dumps(W).encode() + b',"w":'
                                  + json.dumps(W).encode() + b"}", DATA), "S3"),
    "S3_metadata_not_strings": (st_file({"__metadata__": {"a": 1}, "w": W}, DATA), "S3"),
    "S4_unknown_dtype": (st_file({"w": {**W, "dtype": "F33"}}, DATA), "S4"),
    "S4_no_shape": (st_file({"w": {"dtype": "F32", "data_offsets": [0, 24]}}, DATA), "S4"),
    "S4_negative_dim": (st_file({"w": {**W, "shape": [-2, -3]}}, DATA), "S4"),
    "S5_size_mismatch": (st_file({"w": {**W, "data_offsets": [0, 20]}}, DATA[:20]), "S5"),
    "S6_trailing_bytes": (st_file({"w": W}, DATA + bytes(8)), "S6"),
    "S6_gap": (st_file({"w": {**W, "data_offsets": [8, 32]}}, bytes(8) + DATA), "S6"),
    "S6_begin_after_end": (st_file({"w": {**W, "data_offsets": [24, 0]}}, DATA), "S6"),
    "S6_overlap": (st_file({"w": W, "v": {**W, "data_offsets": [0, 24]}}, DATA), "S6"),
}


@pytest.fixture
def tiny(tmp_path):
    return write_model(tmp_path / "tiny", {"w": np.ones((2, 3), np.float32)})


def test_a_valid_tiny_file_reweights(tmp_path, tiny):
    """The mutations below start from this file, which is fine."""
    p, m = tiny
    x = tmp_path / "x.safetensors"
    x.write_bytes(st_file({"w": W}, DATA))
    ptd.reweight(x, tmp_path / "out.ptd", manifest=m)
    assert_loads(tmp_path / "out.ptd", m, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})


@pytest.mark.parametrize("name", list(BROKEN_FILES))
def test_broken_checkpoint_file(tmp_path, tiny, name):
    p, m = tiny
    data, rule = BROKEN_FILES[name]
    x = tmp_path / "x.safetensors"
    x.write_bytes(data)
    out = tmp_path / "out.ptd"
    with pytest.raises(ptd.VerifyError) as e:
        ptd.reweight(x, out, manifest=m, base=p)
    assert e.value.report.errors[0].rule == rule, str(e.value)
    assert str(x) in str(e.value)
    assert not out.exists()


def sharded_tiny(folder, weight_map=None, index=None):
    folder.mkdir(exist_ok=True)
    (folder / "a.safetensors").write_bytes(st_file({"w": W}, DATA))
    path = folder / "model.safetensors.index.json"
    if index is None:
        index = {"metadata": {"total_size": 24}, "weight_map": weight_map or {"w": "a.safetensors"}}
    path.write_text(index if isinstance(index, str) else json.dumps(index))
    return path


@pytest.mark.parametrize("weight_map, index", [
    ({"w": "missing.safetensors"}, None),
    ({"w": "../ckpt/a.safetensors"}, None),
    ({"w": "a.safetensors", "v": "a.safetensors"}, None),  # v is not in a.safetensors.
    (None, [1, 2]),
    (None, {"metadata": {}}),
    (None, {"weight_map": {"w": 3}}),
    (None, "{not json"),
], ids=["missing_shard", "path_separator", "tensor_not_in_shard", "not_an_object",
        "no_weight_map", "file_not_a_string", "not_json"])
def test_broken_index_s7(tmp_path, tiny, weight_map, index):
    p, m = tiny
    path = sharded_tiny(tmp_path / "ckpt", weight_map, index)
    out = tmp_path / "out.ptd"
    raises_rule("S7", lambda: ptd.reweight(path, out, manifest=m, base=p))
    assert not out.exists()


def test_a_broken_shard_is_named(tmp_path, tiny):
    """A rule broken in a shard: the diagnostic's file is the shard."""
    p, m = tiny
    path = sharded_tiny(tmp_path / "ckpt")
    shard = tmp_path / "ckpt" / "a.safetensors"
    shard.write_bytes(BROKEN_FILES["S5_size_mismatch"][0])
    out = tmp_path / "out.ptd"
    with pytest.raises(ptd.VerifyError) as e:
        ptd.reweight(path, out, manifest=m)
    d = e.value.report.errors[0]
    assert (d.rule, d.file) == ("S5", str(shard))
    assert str(e.value).startswith(f"{shard}: ") and not d.message.startswith(str(shard))
    assert d.to_dict()["code"] == "DATA_LOSS"
    assert not out.exists()


def test_a_valid_index_reweights(tmp_path, tiny):
    p, m = tiny
    path = sharded_tiny(tmp_path / "ckpt")
    r = ptd.reweight(path, tmp_path / "out.ptd", manifest=m)
    assert r.written == ("w",)


# ---- arguments and the GIL -------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(rename=[("a.", "b.")]), "rename"),
    (dict(rename={1: "x"}), "rename"),
    (dict(rename={"a": None}), "rename"),
    (dict(base=1.5), "base"),
    (dict(pte=object()), "pte"),
], ids=["rename_list", "rename_key", "rename_value", "base", "pte"])
def test_reweight_bad_arguments(tmp_path, tiny, kwargs, match):
    p, m = tiny
    with pytest.raises(TypeError, match=match):
        ptd.reweight(tmp_path / "x.safetensors", tmp_path / "o.ptd", manifest=m, **kwargs)
    with pytest.raises(TypeError, match="checkpoint"):
        ptd.reweight(12, tmp_path / "o.ptd", manifest=m)
    with pytest.raises(TypeError, match="out"):
        ptd.reweight(tmp_path / "x.safetensors", None, manifest=m)
    assert not (tmp_path / "o.ptd").exists()


def test_missing_checkpoint_is_oserror(tmp_path, tiny):
    p, m = tiny
    with pytest.raises(FileNotFoundError):
        ptd.reweight(tmp_path / "missing.safetensors", tmp_path / "o.ptd", manifest=m)
    with pytest.raises(FileNotFoundError):
        x = tmp_path / "x.safetensors"
        x.write_bytes(st_file({"w": W}, DATA))
        ptd.reweight(x, tmp_path / "o.ptd", manifest=tmp_path / "missing.manifest")
    assert not (tmp_path / "o.ptd").exists()


def test_reweight_into_a_missing_folder_is_oserror(tmp_path, tiny):
    p, m = tiny
    x = tmp_path / "x.safetensors"
    x.write_bytes(st_file({"w": W}, DATA))
    with pytest.raises(FileNotFoundError):
        ptd.reweight(x, tmp_path / "missing" / "out.ptd", manifest=m)
    assert entries(tmp_path) == ["tiny", "x.safetensors"]


def test_second_thread_runs_during_reweight(tmp_path, big_file):
    from test_threads import during

    p, m, weights = big_file
    x = tmp_path / "big.safetensors"
    ptd.extract(p, x, manifest=m)
    out = tmp_path / "out.ptd"
    r, elapsed, ticks = during(lambda: ptd.reweight(x, out, manifest=m))
    assert sorted(r.written) == sorted(weights)
    assert ticks > 0, f"no tick in a {elapsed * 1e3:.0f} ms reweight: the GIL was held"
    assert out.read_bytes() == p.read_bytes()
