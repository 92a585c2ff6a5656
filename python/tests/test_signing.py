"""Signed models: interop with OpenSSF model signing (docs/SPEC.md section 8, rules A1-A7).

The reference is `model_signing` 1.x from PyPI (scripts/setup.sh installs it with
pyopenssl, which its certificate verifier needs); without it every test here skips.
Each test signs a small model folder with the reference (an exported ExecuTorch MLP,
tests/data/executorch/mlp.pte + mlp.ptd, plus a config.json), then checks it three ways:

  * `model_signing.verifying.Config()...verify(folder, signature)`, the reference;
  * `ptd-verify --json MODEL.ptd --pte MODEL.pte --signature SIG
    (--public-key PEM | --certificate-chain PEM) [--model-dir DIR]` ($PTD_VERIFY,
    else build/verifier/ptd-verify: conftest.ptd_verify_binary);
  * `ptd.verify(..., signature=, public_key= | certificate_chain=, model_dir=)` (its
    to_dict() is the CLI's JSON) and `ptd.load(..., device="host", signature=...)`.

What is covered:
  * every method x serialization x hash (key | certificate, files | shards,
    sha256 | blake2b) verifies everywhere, and a signed load hands out the same bytes
    as an unsigned one; P-384 keys, a signed manifest, a model below its folder;
  * tampering: a flipped weight byte is A5 (naming the file, and the shard's range);
    a wrong key or root, a forged key hint or signature, A2; another folder's
    signature, A5/A4; an unlisted file, A6; a truncated, garbage or undecodable
    signature file, A1; a re-signed statement with a wrong subject digest, predicate
    type, statement type, method or hash, A3; a listed file deleted or a shard
    dropped, A4 (or A5/A6); and for every refusal, the reference refuses too (parity);
  * what the reference accepts and this implementation does not verify (BLAKE3, a
    Sigstore keyless bundle) is A7 — the one place the two may disagree.

Re-signed statements are built here: the DSSE envelope signed with `cryptography`
(ECDSA over PAE = b"DSSEv1 %d %s %d %s" % (len(type), type, len(payload), payload)),
and `test_hand_signed_envelope_verifies` checks that both sides accept one unchanged.

Reference quirks met while writing these (model_signing 1.1.1):
  * the hash is "blake2" in its Config API but "blake2b" in the payload; verifying
    without an explicit hashing config (guessed from the payload) fails for blake2b,
    so `reference_refusal` always passes the signing config;
  * a verify call mutates the hashing config it is given (add_ignored_paths), so
    every call here builds a fresh one;
  * `shard_size` is written as a JSON float (1024.0); resources are sorted by
    (path, start, end) with numeric offsets;
  * the certificate verifier checks the chain at the leaf's notBefore, not now;
  * the key hint is sha256 of the public key's PEM SubjectPublicKeyInfo text; a bundle
    without a hint only prints a warning there;
  * BLAKE3 is accepted (files only: shards with blake3 silently become files);
  * guessing the hashing config from the payload fails for every "shards" signature
    too ("'float' object cannot be interpreted as an integer": shard_size is a float);
  * "shards" lists no resource at all for an empty file, so an unlisted empty file
    is no extra file there (it is under "files"): `test_empty_unlisted_file`;
  * a wrong public key fails on the hint ("Key mismatch: ...") before the signature;
    a forged signature is cryptography's InvalidSignature with an empty message;
    a "Hash mismatch" message shows Digest reprs, not hex.

The whole file runs in a few seconds: the models are a few KiB, shards 1 KiB.
"""
import base64
import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any, Callable, Optional

import pytest

model_signing = pytest.importorskip("model_signing")
pytest.importorskip("OpenSSL")  # model_signing's certificate verifier
pytest.importorskip("cryptography")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

import ptd  # noqa: E402
from conftest import CASES, ROOT, case_args, ptd_verify_binary  # noqa: E402

# The exported ExecuTorch models (the same files as the shared ../shared/executorch).
MODELS = next((d for d in (ROOT / "tests" / "data" / "executorch",
                           ROOT.parent / "shared" / "executorch")
               if (d / "mlp.ptd").is_file() and (d / "mlp.pte").is_file()), None)
if MODELS is None:
    pytest.skip("no exported ExecuTorch model (tests/data/executorch/mlp.pte + mlp.ptd)",
                allow_module_level=True)

SHARD_SIZE = 1024  # mlp.ptd is 3744 bytes: 4 shards, the weights spread over them.
CONFIG_JSON = b'{"model": "mlp", "in_features": 16, "out_features": 8}\n'
SIG = "model.sig"
METHODS = ("key", "certificate")
SERIALIZATIONS = ("files", "shards")
HASHES = ("sha256", "blake2")  # model_signing's names; the payload says "blake2b".
PAYLOAD_HASH = {"sha256": "sha256", "blake2": "blake2b", "blake3": "blake3"}


# ---- keys and certificates ------------------------------------------------------------


def _pem_private(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_public(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(key, cn: str, issuer_key, issuer_name: Optional[x509.Name], *, ca: bool,
          path_length: Optional[int] = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = dict(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                 data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                 encipher_only=False, decipher_only=False)
    b = (x509.CertificateBuilder()
         .subject_name(_name(cn))
         .issuer_name(issuer_name or _name(cn))
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(days=1))
         .not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length), critical=True)
         .add_extension(x509.KeyUsage(**usage), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                        critical=False))
    if not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]),
                            critical=False)
    if issuer_key is not key:
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False)
    digest = hashes.SHA384() if issuer_key.curve.key_size == 384 else hashes.SHA256()
    return b.sign(issuer_key, digest)


@dataclasses.dataclass
class Pki:
    dir: pathlib.Path
    keys: "dict[str, Any]"   # name -> EC private key object
    private: "dict[str, pathlib.Path]"
    public: "dict[str, pathlib.Path]"
    root: pathlib.Path          # the trusted root (P-384, signs with SHA-384)
    intermediate: pathlib.Path  # P-256, in the signature's chain
    leaf: pathlib.Path          # P-256, digitalSignature + codeSigning
    other_root: pathlib.Path    # a root nothing chains to


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    keys = {"p256": ec.generate_private_key(ec.SECP256R1()),
            "p384": ec.generate_private_key(ec.SECP384R1()),
            "other": ec.generate_private_key(ec.SECP256R1()),
            "root": ec.generate_private_key(ec.SECP384R1()),
            "intermediate": ec.generate_private_key(ec.SECP256R1()),
            "leaf": ec.generate_private_key(ec.SECP256R1()),
            "other_root": ec.generate_private_key(ec.SECP256R1())}
    private, public = {}, {}
    for name, key in keys.items():
        private[name] = d / f"{name}.key"
        private[name].write_bytes(_pem_private(key))
        public[name] = d / f"{name}.pub"
        public[name].write_bytes(_pem_public(key))
    root = _cert(keys["root"], "ptd test root", keys["root"], None, ca=True, path_length=1)
    inter = _cert(keys["intermediate"], "ptd test intermediate", keys["root"], root.subject,
                  ca=True, path_length=0)
    leaf = _cert(keys["leaf"], "ptd test signer", keys["intermediate"], inter.subject, ca=False)
    other = _cert(keys["other_root"], "ptd test root", keys["other_root"], None, ca=True,
                  path_length=1)
    paths = {}
    for name, c in (("root", root), ("intermediate", inter), ("leaf", leaf),
                    ("other_root", other)):
        paths[name] = d / f"{name}.pem"
        paths[name].write_bytes(c.public_bytes(serialization.Encoding.PEM))
    return Pki(d, keys, private, public, paths["root"], paths["intermediate"], paths["leaf"],
               paths["other_root"])


# ---- a signed folder --------------------------------------------------------------------


@dataclasses.dataclass
class Signed:
    dir: pathlib.Path            # the signed folder
    sig: pathlib.Path
    method: str                  # "key" | "certificate"
    serialization: str           # "files" | "shards"
    hash: str                    # model_signing's name: "sha256" | "blake2" | "blake3"
    trust: pathlib.Path          # the public key (key) or the root (certificate) to check with
    signer: Any                  # the private key that signed (for re-signing statements)
    ptd_rel: str = "mlp.ptd"
    pte_rel: str = "mlp.pte"
    model_dir: Optional[pathlib.Path] = None  # passed explicitly when set
    manifest_rel: Optional[str] = None

    @property
    def ptd(self) -> pathlib.Path:
        return self.dir / self.ptd_rel

    @property
    def pte(self) -> Optional[pathlib.Path]:
        return self.dir / self.pte_rel if self.pte_rel else None

    @property
    def manifest(self) -> Optional[pathlib.Path]:
        return self.dir / self.manifest_rel if self.manifest_rel else None


def hashing_config(serialization_: str, hash_: str, shard_size: int = SHARD_SIZE):
    """A fresh config each time: model_signing's verify mutates the one it gets."""
    c = model_signing.hashing.Config()
    if serialization_ == "files":
        c.use_file_serialization(hashing_algorithm=hash_)
    else:
        c.use_shard_serialization(hashing_algorithm=hash_, shard_size=shard_size)
    return c.set_ignored_paths(paths=[SIG])


def make_model(d: pathlib.Path, source: str = "mlp", sub: str = "") -> pathlib.Path:
    """A model folder: SOURCE.pte/.ptd copied as mlp.pte/mlp.ptd (under `sub`), and a
    config.json. Copied without the source's mode (it may be read-only)."""
    (d / sub).mkdir(parents=True, exist_ok=True)
    for ext in ("pte", "ptd"):
        shutil.copyfile(MODELS / f"{source}.{ext}", d / sub / f"mlp.{ext}")
    (d / "config.json").write_bytes(CONFIG_JSON)
    return d


def sign(d: pathlib.Path, pki: Pki, method: str = "key", serialization_: str = "files",
         hash_: str = "sha256", *, key: str = "p256", sig: Optional[pathlib.Path] = None,
         **kw) -> Signed:
    sig = sig or d / SIG
    c = model_signing.signing.Config()
    if method == "key":
        c.use_elliptic_key_signer(private_key=pki.private[key])
        trust, signer = pki.public[key], pki.keys[key]
    else:
        c.use_certificate_signer(private_key=pki.private["leaf"], signing_certificate=pki.leaf,
                                 certificate_chain=[pki.intermediate])
        trust, signer = pki.root, pki.keys["leaf"]
    c.set_hashing_config(hashing_config(serialization_, hash_)).sign(d, sig)
    return Signed(d, sig, method, serialization_, hash_, trust, signer, **kw)


def signed_model(tmp_path: pathlib.Path, pki: Pki, method: str = "key",
                 serialization_: str = "files", hash_: str = "sha256", **kw) -> Signed:
    return sign(make_model(tmp_path / "model"), pki, method, serialization_, hash_, **kw)


# ---- the three checkers ------------------------------------------------------------------


def reference_refusal(s: Signed) -> Optional[str]:
    """None when model_signing accepts the folder, else "ExceptionType: message"."""
    c = model_signing.verifying.Config()
    if s.method == "key":
        c.use_elliptic_key_verifier(public_key=s.trust)
    else:
        c.use_certificate_verifier(certificate_chain=[s.trust])
    c.set_hashing_config(hashing_config(s.serialization, s.hash))
    try:
        c.verify(s.dir, s.sig)
    except Exception as e:  # noqa: BLE001 - any refusal counts (ValueError, KeyError, ...)
        return f"{type(e).__name__}: {e}"
    return None


def trust_kwargs(s: Signed) -> "dict[str, Any]":
    kw: "dict[str, Any]" = {"signature": str(s.sig)}
    kw["public_key" if s.method == "key" else "certificate_chain"] = str(s.trust)
    if s.model_dir is not None:
        kw["model_dir"] = str(s.model_dir)
    return kw


def cli_args(s: Signed, signed: bool = True) -> "list[str]":
    args = [str(s.ptd)]
    if s.pte is not None:
        args += ["--pte", str(s.pte)]
    if s.manifest is not None:
        args += ["--manifest", str(s.manifest)]
    if signed:
        args += ["--signature", str(s.sig),
                 "--public-key" if s.method == "key" else "--certificate-chain", str(s.trust)]
        if s.model_dir is not None:
            args += ["--model-dir", str(s.model_dir)]
    return args


@pytest.fixture(scope="session")
def cli():
    """Runs `ptd-verify --json ARGS` for a Signed: (exit code, JSON)."""
    binary = ptd_verify_binary()
    if binary is None:
        pytest.skip("ptd-verify not found (set PTD_VERIFY or build build/verifier/ptd-verify)")

    def run(s: Signed, signed: bool = True):
        r = subprocess.run([binary, "--json", *cli_args(s, signed)], capture_output=True,
                           text=True, timeout=60)
        try:
            d = json.loads(r.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"ptd-verify exit {r.returncode}, no JSON on stdout; "
                        f"stderr: {r.stderr.strip()[-2000:]}")
        return r.returncode, d

    return run


def py_verify(s: Signed) -> "ptd.Report":
    return ptd.verify(s.ptd, pte=s.pte, manifest=s.manifest, **trust_kwargs(s))


def py_load(s: Signed, signed: bool = True) -> "ptd.Weights":
    return ptd.load(s.ptd, pte=s.pte, manifest=s.manifest, device="host",
                    **(trust_kwargs(s) if signed else {}))


def contents(weights) -> "dict[str, bytes]":
    """Each entry's bytes: a key's bytes (no manifest), or a tensor's elements."""
    import numpy as np

    out = {}
    for name, v in weights.items():
        if isinstance(v, (bytes, bytearray, memoryview)):
            out[name] = bytes(v)
        else:
            t = v.view_as("uint16") if v.dtype == "bfloat16" else v
            out[name] = np.ascontiguousarray(np.from_dlpack(t)).tobytes()
    return out


# ---- building and re-signing statements ---------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def dsse_sign(key, payload_type: str, payload: bytes) -> bytes:
    digest = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}
    return key.sign(pae(payload_type, payload), ec.ECDSA(digest[key.curve.key_size]))


def subject_digest(statement: "dict[str, Any]") -> str:
    h = hashlib.sha256()
    for r in statement["predicate"]["resources"]:
        h.update(bytes.fromhex(r["digest"]))
    return h.hexdigest()


def resign(s: Signed, edit: Callable[["dict[str, Any]"], None], *, fix_subject: bool = True,
           key=None) -> None:
    """Rewrites s.sig: its statement edited by `edit`, the subject digest recomputed
    (unless fix_subject is False), and the envelope signed again by s.signer."""
    bundle = json.loads(s.sig.read_text())
    env = bundle["dsseEnvelope"]
    statement = json.loads(base64.b64decode(env["payload"]))
    edit(statement)
    if fix_subject:
        statement["subject"][0]["digest"]["sha256"] = subject_digest(statement)
    payload = json.dumps(statement, indent=2).encode()
    env["payload"] = base64.b64encode(payload).decode()
    sig = dsse_sign(key or s.signer, env["payloadType"], payload)
    env["signatures"] = [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]
    s.sig.write_text(json.dumps(bundle))


def edit_bundle(s: Signed, edit: Callable[["dict[str, Any]"], None]) -> None:
    bundle = json.loads(s.sig.read_text())
    edit(bundle)
    s.sig.write_text(json.dumps(bundle))


def weight_offset(cli, s: Signed, key: str = "fc1.weight") -> int:
    """A byte in the middle of `key`'s stored bytes, from the unsigned ptd-verify JSON:
    flipping it leaves every geometry rule intact."""
    rc, d = cli(s, signed=False)
    assert rc == 0, d["errors"]
    p = d["ptd"]
    entry = next(e for e in p["named_data"] if e["key"] == key)
    seg = p["segments"][entry["segment_index"]]
    return p["segment_base_offset"] + seg["offset"] + entry["size"] // 2


def flip_byte(path: pathlib.Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


# ---- checks shared by the tests -------------------------------------------------------------


def assert_verified(s: Signed, cli) -> "dict[str, Any]":
    """Reference, CLI, ptd.verify and ptd.load all accept `s`; returns the CLI JSON."""
    assert reference_refusal(s) is None
    rc, d = cli(s)
    assert rc == 0 and d["ok"], d["errors"]
    assert d["errors"] == []
    sig = d["signature"]
    assert sig["checked"] is True and sig["verified"] is True
    assert sig["error"] is None and sig["rule"] is None
    assert sig["method"] == s.method
    assert sig["serialization"] == s.serialization
    assert sig["hash"] == PAYLOAD_HASH[s.hash]
    if s.serialization == "shards":
        assert sig["shard_size"] == SHARD_SIZE
    assert sig["signature"] == str(s.sig)
    assert pathlib.Path(sig["model_dir"]).resolve() == (s.model_dir or s.ptd.parent).resolve()
    assert isinstance(sig["one_pass"], bool)
    listed = {str(p.relative_to(s.dir)) for p in s.dir.rglob("*")
              if p.is_file() and p != s.sig}
    files = {f["name"]: f for f in sig["files"]}
    assert set(files) == listed
    for name, f in files.items():
        assert f["ok"] is True, f
        assert f["bytes"] == (s.dir / name).stat().st_size
        assert f["read"] in ("load", "apart")

    report = py_verify(s)
    assert report.ok and report.errors == ()
    assert report.to_dict() == d

    weights = py_load(s)
    assert contents(weights) == contents(py_load(s, signed=False))
    return d


def assert_refused(s: Signed, cli, rules: "set[str]", *, reference: bool = True) -> str:
    """The CLI, ptd.verify and ptd.load refuse `s` with one of `rules`, and (parity) the
    reference refuses it too unless `reference` is False. Returns the CLI's message."""
    ref = reference_refusal(s)
    rc, d = cli(s)
    ptd_refuses = rc != 0
    if reference:
        assert (ref is not None) == ptd_refuses, (
            f"parity: model_signing {'refuses: ' + ref if ref else 'accepts'}, "
            f"ptd-verify exit {rc}: {d.get('errors')}")
    assert rc == 1, d.get("errors")
    assert not d["ok"]
    found = [e for e in d["errors"] if e["rule"] in rules]
    assert found, (rules, d["errors"])
    assert found[0]["message"].endswith(f"({found[0]['rule']})")
    sig = d["signature"]
    assert sig["checked"] is True and sig["verified"] is False
    assert sig["rule"] in rules, sig
    assert sig["error"] and sig["error"].endswith(f"({sig['rule']})")

    report = py_verify(s)
    assert not report.ok
    assert {e.rule for e in report.errors} & rules
    assert report.to_dict() == d

    with pytest.raises(ptd.VerifyError) as info:
        py_load(s)
    assert info.value.rule in rules, str(info.value)
    return found[0]["message"]


# ---- 1. signed models verify everywhere ----------------------------------------------------


@pytest.mark.parametrize("hash_", HASHES)
@pytest.mark.parametrize("serialization_", SERIALIZATIONS)
@pytest.mark.parametrize("method", METHODS)
def test_signed_model_verifies(tmp_path, pki, cli, method, serialization_, hash_):
    s = signed_model(tmp_path, pki, method, serialization_, hash_)
    d = assert_verified(s, cli)
    if serialization_ == "shards":
        statement = json.loads(base64.b64decode(
            json.loads(s.sig.read_text())["dsseEnvelope"]["payload"]))
        shards = [r for r in statement["predicate"]["resources"]
                  if r["name"].startswith("mlp.ptd:")]
        assert len(shards) == -(-s.ptd.stat().st_size // SHARD_SIZE) > 1
    assert {f["name"] for f in d["signature"]["files"]} == {"config.json", "mlp.ptd", "mlp.pte"}


def test_p384_key(tmp_path, pki, cli):
    assert_verified(signed_model(tmp_path, pki, "key", "shards", "blake2", key="p384"), cli)


def test_explicit_model_dir_and_a_model_below_it(tmp_path, pki, cli):
    # The .ptd and .pte in weights/, the signature naming them "weights/mlp.ptd".
    d = make_model(tmp_path / "model", sub="weights")
    s = sign(d, pki, "key", "shards", "sha256", ptd_rel="weights/mlp.ptd",
             pte_rel="weights/mlp.pte", model_dir=d)
    out = assert_verified(s, cli)
    assert {f["name"] for f in out["signature"]["files"]} == {
        "config.json", "weights/mlp.ptd", "weights/mlp.pte"}


def test_signature_outside_the_folder(tmp_path, pki, cli):
    d = make_model(tmp_path / "model")
    assert_verified(sign(d, pki, "certificate", "files", "sha256", sig=tmp_path / "out.sig"),
                    cli)


def test_ignored_paths_are_not_extra_files(tmp_path, pki, cli):
    # The reference ignores .git, .github, .gitattributes, .gitignore and what the
    # signature lists in ignore_paths (model.sig): files added there are no A6.
    s = signed_model(tmp_path, pki, "key", "files", "sha256")
    (s.dir / ".gitignore").write_text("*.tmp\n")
    (s.dir / ".git").mkdir()
    (s.dir / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert reference_refusal(s) is None
    rc, d = cli(s)
    assert rc == 0, d["errors"]
    assert d["signature"]["verified"] is True
    assert py_verify(s).ok


def test_signed_manifest_and_pte(tmp_path, pki, cli):
    # A CUDA model: .ptd + standalone manifest + .pte, every one of them signed.
    case = next(c for c in CASES if c["name"] == "k01_view_geometry")
    ptd_path, manifest, pte = case_args(case)
    d = tmp_path / "model"
    d.mkdir()
    for p in (ptd_path, manifest, pte):
        shutil.copyfile(p, d / pathlib.Path(p).name)
    names = [pathlib.Path(p).name for p in (ptd_path, manifest, pte)]
    s = sign(d, pki, "key", "shards", "sha256", ptd_rel=names[0], manifest_rel=names[1],
             pte_rel=names[2])
    out = assert_verified(s, cli)
    assert {f["name"] for f in out["signature"]["files"]} == set(names)


def test_hand_signed_envelope_verifies(tmp_path, pki, cli):
    # The re-signing helper itself: an unchanged statement, signed here, is accepted by
    # both sides (so the A3 cases below fail for their edit, not for the envelope).
    for method in METHODS:
        s = signed_model(tmp_path / method, pki, method, "shards", "sha256")
        resign(s, lambda st: None)
        assert_verified(s, cli)


# ---- 2. a flipped weight byte: A5 ------------------------------------------------------------


@pytest.mark.parametrize("method,serialization_,hash_", [
    ("key", "files", "sha256"), ("key", "files", "blake2"), ("key", "shards", "sha256"),
    ("key", "shards", "blake2"), ("certificate", "shards", "sha256"),
    ("certificate", "files", "blake2")])
def test_tampered_weight_is_a5(tmp_path, pki, cli, method, serialization_, hash_):
    s = signed_model(tmp_path, pki, method, serialization_, hash_)
    offset = weight_offset(cli, s)
    flip_byte(s.ptd, offset)
    rc, unsigned = cli(s, signed=False)
    assert rc == 0, unsigned["errors"]  # the geometry still holds: only the signature sees it

    ref = reference_refusal(s)
    # The reference's message is a list's repr: its quotes may come escaped.
    assert ref is not None and "Hash mismatch for " in ref and "mlp.ptd" in ref, ref
    message = assert_refused(s, cli, {"A5"})
    assert "mlp.ptd" in message
    if serialization_ == "shards":
        start = offset // SHARD_SIZE * SHARD_SIZE
        end = min(start + SHARD_SIZE, s.ptd.stat().st_size)
        assert f"mlp.ptd:{start}:{end}" in ref
        assert str(start) in message and str(end) in message, message
    rc, d = cli(s)
    files = {f["name"]: f for f in d["signature"]["files"]}
    assert files["mlp.ptd"]["ok"] is False, files
    assert files["mlp.ptd"]["error"].endswith("(A5)")
    assert all(not (f["error"] or "").endswith("(A5)") for n, f in files.items() if n != "mlp.ptd")


def test_tampered_config_is_a5(tmp_path, pki, cli):
    # A file the load never reads is hashed too.
    s = signed_model(tmp_path, pki, "key", "files", "sha256")
    (s.dir / "config.json").write_bytes(CONFIG_JSON.replace(b"16", b"17"))
    assert "config.json" in assert_refused(s, cli, {"A5"})


# ---- 3. refusals, each with the reference refusing too (parity) ------------------------------


def _wrong_key(s, pki, tmp_path):
    s.trust = pki.public["other"]


def _wrong_root(s, pki, tmp_path):
    s.trust = pki.other_root


def _hint_mismatch(s, pki, tmp_path):
    # The right key, but the bundle's hint names another.
    other = hashlib.sha256(pki.public["other"].read_bytes()).hexdigest()
    edit_bundle(s, lambda b: b["verificationMaterial"]["publicKey"].update(hint=other))


def _forged_signature(s, pki, tmp_path):
    def edit(b):
        sig = bytearray(base64.b64decode(b["dsseEnvelope"]["signatures"][0]["sig"]))
        sig[-1] ^= 0x01
        b["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    edit_bundle(s, edit)


def _payload_changed_unsigned(s, pki, tmp_path):
    # A consistent statement (subject digest fixed) that nobody signed.
    def edit(b):
        st = json.loads(base64.b64decode(b["dsseEnvelope"]["payload"]))
        st["predicate"]["resources"][0]["digest"] = "00" * (len(
            st["predicate"]["resources"][0]["digest"]) // 2)
        st["subject"][0]["digest"]["sha256"] = subject_digest(st)
        b["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    edit_bundle(s, edit)


def _other_folders_signature(s, pki, tmp_path):
    # Another model (the XNNPACK export) under the same names, signed the same way.
    other = sign(make_model(tmp_path / "other", source="mlp_xnnpack"), pki, s.method,
                 s.serialization, s.hash)
    shutil.copyfile(other.sig, s.sig)


def _extra_file(s, pki, tmp_path):
    (s.dir / "extra.bin").write_bytes(b"\0" * 10)


def _extra_file_below(s, pki, tmp_path):
    (s.dir / "sub").mkdir()
    (s.dir / "sub" / "notes.txt").write_text("unsigned\n")


def _deleted_file(s, pki, tmp_path):
    (s.dir / "config.json").unlink()


def _emptied_file(s, pki, tmp_path):
    (s.dir / "config.json").write_bytes(b"")


def _truncated(s, pki, tmp_path):
    data = s.sig.read_bytes()
    s.sig.write_bytes(data[:len(data) // 2])


def _garbage(s, pki, tmp_path):
    s.sig.write_bytes(bytes(range(256)) * 4)


def _empty(s, pki, tmp_path):
    s.sig.write_bytes(b"")


def _not_an_object(s, pki, tmp_path):
    s.sig.write_text("[1, 2, 3]\n")


def _bad_base64_payload(s, pki, tmp_path):
    edit_bundle(s, lambda b: b["dsseEnvelope"].update(payload="%%% not base64 %%%"))


def _payload_not_json(s, pki, tmp_path):
    def edit(b):
        payload = b"this is not a statement"
        b["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
        sig = dsse_sign(s.signer, b["dsseEnvelope"]["payloadType"], payload)
        b["dsseEnvelope"]["signatures"] = [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]
    edit_bundle(s, edit)


def _no_signatures(s, pki, tmp_path):
    edit_bundle(s, lambda b: b["dsseEnvelope"].update(signatures=[]))


def _wrong_subject_digest(s, pki, tmp_path):
    def edit(st):
        st["subject"][0]["digest"]["sha256"] = "ab" * 32
    resign(s, edit, fix_subject=False)


def _wrong_predicate_type(s, pki, tmp_path):
    resign(s, lambda st: st.update(predicateType="https://model_signing/signature/v9.9"))


def _wrong_statement_type(s, pki, tmp_path):
    resign(s, lambda st: st.update(_type="https://in-toto.io/Statement/v0.1"))


def _unknown_method(s, pki, tmp_path):
    resign(s, lambda st: st["predicate"]["serialization"].update(method="layers"))


def _unknown_hash(s, pki, tmp_path):
    def edit(st):
        st["predicate"]["serialization"]["hash_type"] = "md5"
        for r in st["predicate"]["resources"]:
            r["algorithm"] = "md5"
    resign(s, edit)


def _resigned_digest_of_other_bytes(s, pki, tmp_path):
    # A validly signed statement whose digest for mlp.ptd is not the file's.
    def edit(st):
        for r in st["predicate"]["resources"]:
            if r["name"].startswith("mlp.ptd"):
                r["digest"] = hashlib.sha256(b"other").hexdigest() * (len(r["digest"]) // 64)
    resign(s, edit)


def _ptd_not_listed(s, pki, tmp_path):
    # A validly signed statement without the .ptd: it is read but not covered (A4),
    # and it is a file the signature does not list (A6).
    def edit(st):
        st["predicate"]["resources"] = [r for r in st["predicate"]["resources"]
                                        if not r["name"].startswith("mlp.ptd")]
    resign(s, edit)


def _last_shard_dropped(s, pki, tmp_path):
    # The .ptd's shards stop short of its end: not covered byte for byte.
    def edit(st):
        rs = st["predicate"]["resources"]
        last = max((r for r in rs if r["name"].startswith("mlp.ptd:")),
                   key=lambda r: int(r["name"].split(":")[1]))
        rs.remove(last)
    resign(s, edit)


def _shard_past_end(s, pki, tmp_path):
    # The last shard claims bytes past the file's end (the digest kept).
    def edit(st):
        rs = st["predicate"]["resources"]
        last = max((r for r in rs if r["name"].startswith("mlp.ptd:")),
                   key=lambda r: int(r["name"].split(":")[1]))
        path, start, end = last["name"].split(":")
        last["name"] = f"{path}:{start}:{int(start) + SHARD_SIZE}"
    resign(s, edit)


# (id, method, serialization, hash, change, rules the refusal may carry)
REFUSALS = [
    ("wrong_key", "key", "files", "sha256", _wrong_key, {"A2"}),
    ("wrong_key_shards", "key", "shards", "blake2", _wrong_key, {"A2"}),
    ("wrong_root", "certificate", "files", "sha256", _wrong_root, {"A2"}),
    ("hint_mismatch", "key", "files", "sha256", _hint_mismatch, {"A2"}),
    ("forged_signature_key", "key", "shards", "sha256", _forged_signature, {"A2"}),
    ("forged_signature_certificate", "certificate", "files", "blake2", _forged_signature,
     {"A2"}),
    ("payload_changed_unsigned", "key", "files", "sha256", _payload_changed_unsigned, {"A2"}),
    ("other_folders_signature", "key", "files", "sha256", _other_folders_signature,
     {"A4", "A5"}),
    ("other_folders_signature_shards", "certificate", "shards", "blake2",
     _other_folders_signature, {"A4", "A5"}),
    ("extra_file", "key", "files", "sha256", _extra_file, {"A6"}),
    ("extra_file_shards", "key", "shards", "blake2", _extra_file, {"A6"}),
    ("extra_file_below", "certificate", "files", "sha256", _extra_file_below, {"A6"}),
    ("deleted_listed_file", "key", "files", "sha256", _deleted_file, {"A4", "A5"}),
    ("deleted_listed_file_shards", "key", "shards", "sha256", _deleted_file, {"A4", "A5"}),
    ("listed_file_emptied", "key", "files", "sha256", _emptied_file, {"A5"}),
    ("listed_file_emptied_shards", "key", "shards", "sha256", _emptied_file, {"A4", "A5"}),
    ("truncated_signature", "key", "files", "sha256", _truncated, {"A1"}),
    ("truncated_signature_certificate", "certificate", "shards", "sha256", _truncated, {"A1"}),
    ("garbage_signature", "key", "files", "sha256", _garbage, {"A1"}),
    ("empty_signature", "key", "files", "sha256", _empty, {"A1"}),
    ("signature_not_an_object", "key", "files", "sha256", _not_an_object, {"A1"}),
    ("bad_base64_payload", "key", "files", "sha256", _bad_base64_payload, {"A1"}),
    ("no_signatures", "key", "files", "sha256", _no_signatures, {"A1"}),
    ("payload_not_json", "key", "files", "sha256", _payload_not_json, {"A1", "A3"}),
    ("wrong_subject_digest", "key", "files", "sha256", _wrong_subject_digest, {"A3"}),
    ("wrong_subject_digest_certificate", "certificate", "shards", "blake2",
     _wrong_subject_digest, {"A3"}),
    ("wrong_predicate_type", "key", "files", "sha256", _wrong_predicate_type, {"A3"}),
    ("wrong_statement_type", "key", "files", "sha256", _wrong_statement_type, {"A3"}),
    ("unknown_method", "key", "files", "sha256", _unknown_method, {"A3"}),
    ("unknown_hash", "key", "files", "sha256", _unknown_hash, {"A3"}),
    ("resigned_wrong_digest", "key", "files", "sha256", _resigned_digest_of_other_bytes,
     {"A5"}),
    ("resigned_wrong_digest_shards", "key", "shards", "blake2",
     _resigned_digest_of_other_bytes, {"A5"}),
    ("ptd_not_listed", "key", "files", "sha256", _ptd_not_listed, {"A4", "A6"}),
    ("last_shard_dropped", "key", "shards", "sha256", _last_shard_dropped, {"A4"}),
    ("shard_past_end", "key", "shards", "sha256", _shard_past_end, {"A3", "A4"}),
]


@pytest.mark.parametrize("method,serialization_,hash_,change,rules",
                         [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refused_by_both(tmp_path, pki, cli, method, serialization_, hash_, change, rules):
    s = signed_model(tmp_path, pki, method, serialization_, hash_)
    assert reference_refusal(s) is None
    change(s, pki, tmp_path)
    assert reference_refusal(s) is not None  # the reference refuses ...
    assert_refused(s, cli, rules)            # ... and so does ptd, with the rule


def test_wrong_key_names_the_signature(tmp_path, pki, cli):
    s = signed_model(tmp_path, pki, "key", "files", "sha256")
    s.trust = pki.public["other"]
    message = assert_refused(s, cli, {"A2"})
    assert str(s.sig) in message or SIG in message


def test_extra_file_is_named(tmp_path, pki, cli):
    s = signed_model(tmp_path, pki, "key", "files", "sha256")
    _extra_file(s, pki, tmp_path)
    ref = reference_refusal(s)
    assert ref is not None and "Extra files found in model" in ref and "extra.bin" in ref
    assert "extra.bin" in assert_refused(s, cli, {"A6"})


@pytest.mark.parametrize("serialization_", SERIALIZATIONS)
def test_empty_unlisted_file(tmp_path, pki, cli, serialization_):
    # The reference's "shards" has no resource for an empty file, so an empty file
    # added after signing is no extra file there; under "files" it is (A6). SPEC A6:
    # "as the reference refuses it".
    s = signed_model(tmp_path, pki, "key", serialization_, "sha256")
    (s.dir / "empty.bin").write_bytes(b"")
    if serialization_ == "files":
        assert "empty.bin" in assert_refused(s, cli, {"A6"})
        return
    assert reference_refusal(s) is None
    rc, d = cli(s)
    assert rc == 0 and d["signature"]["verified"] is True, d["errors"]
    assert py_verify(s).ok


# ---- A7: what the reference accepts and this implementation does not verify -----------------


def test_blake3_is_a7(tmp_path, pki, cli):
    s = signed_model(tmp_path, pki, "key", "files", "blake3")
    assert reference_refusal(s) is None  # the reference verifies BLAKE3
    message = assert_refused(s, cli, {"A7"}, reference=False)
    assert "blake3" in message


def test_keyless_bundle_is_a7(tmp_path, pki, cli):
    # A Sigstore keyless bundle's shape: one certificate and a transparency-log entry.
    s = signed_model(tmp_path, pki, "certificate", "files", "sha256")
    leaf_der = x509.load_pem_x509_certificate(pki.leaf.read_bytes()).public_bytes(
        serialization.Encoding.DER)

    def edit(b):
        b["verificationMaterial"] = {
            "certificate": {"rawBytes": base64.b64encode(leaf_der).decode()},
            "tlogEntries": [{
                "logIndex": "1", "logId": {"keyId": base64.b64encode(b"\0" * 32).decode()},
                "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                "integratedTime": "1700000000",
                "canonicalizedBody": base64.b64encode(b"{}").decode()}]}
    edit_bundle(s, edit)
    message = assert_refused(s, cli, {"A7"}, reference=False)
    assert any(w in message.lower() for w in ("keyless", "sigstore", "tlog", "transparency"))


# ---- the tensors a signed load hands out --------------------------------------------------


def test_signed_load_equals_unsigned(tmp_path, pki):
    s = signed_model(tmp_path, pki, "certificate", "shards", "blake2")
    signed = py_load(s)
    unsigned = py_load(s, signed=False)
    assert sorted(signed) == sorted(unsigned) == ["fc1.bias", "fc1.weight", "fc2.bias",
                                                  "fc2.weight"]
    assert contents(signed) == contents(unsigned)
    assert os.path.getsize(s.ptd) == (MODELS / "mlp.ptd").stat().st_size
