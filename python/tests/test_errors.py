"""Unreadable inputs raise OSError; bad arguments ValueError or TypeError."""
import pytest

import ptd
from conftest import CASES, case_args

K01 = next(c for c in CASES if c["name"] == "k01_view_geometry")


def test_missing_ptd(tmp_path):
    with pytest.raises(FileNotFoundError):
        ptd.verify(tmp_path / "missing.ptd")
    with pytest.raises(FileNotFoundError):
        ptd.load(tmp_path / "missing.ptd", device="host")


def test_missing_manifest_and_pte(tmp_path):
    ptd_path, _, _ = case_args(K01)
    with pytest.raises(FileNotFoundError):
        ptd.verify(ptd_path, manifest=tmp_path / "missing.manifest")
    with pytest.raises(FileNotFoundError):
        ptd.verify(ptd_path, pte=tmp_path / "missing.pte")
    with pytest.raises(FileNotFoundError):
        ptd.load(ptd_path, manifest=tmp_path / "missing.manifest", device="host")


def test_directory_is_oserror(tmp_path):
    with pytest.raises(OSError):
        ptd.verify(tmp_path)


@pytest.mark.parametrize("kwargs, exc", [
    (dict(sm="90"), TypeError),
    (dict(sm=0), ValueError),
    (dict(sm=-1), ValueError),
    (dict(sm=True), TypeError),
    (dict(manifest=12), TypeError),
])
def test_verify_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        ptd.verify(case_args(K01)[0], **kwargs)


def test_verify_bad_path_type():
    with pytest.raises(TypeError):
        ptd.verify(None)
    with pytest.raises(TypeError):
        ptd.verify(3.5)


@pytest.mark.parametrize("kwargs, exc", [
    (dict(device="gpu"), ValueError),
    (dict(device="cuda:x"), ValueError),
    (dict(device=0), TypeError),
    (dict(threads=0), ValueError),
    (dict(threads="4"), TypeError),
    (dict(map_file=1), TypeError),
    (dict(fqns="layers.0.attn.q"), TypeError),
    (dict(fqns=[1]), TypeError),
    (dict(progress=5), TypeError),
    (dict(sm=-3), ValueError),
])
def test_load_bad_arguments(kwargs, exc):
    ptd_path, manifest, _ = case_args(K01)
    kwargs.setdefault("device", "host")
    with pytest.raises(exc):
        ptd.load(ptd_path, manifest=manifest, **kwargs)


def test_load_unknown_fqn_is_keyerror():
    ptd_path, manifest, _ = case_args(K01)
    with pytest.raises(KeyError, match="no.such.weight"):
        ptd.load(ptd_path, manifest=manifest, device="host", fqns=["no.such.weight"])


def test_cuda_without_cuda_is_runtime_error():
    if ptd._ptd.has_cuda:
        pytest.skip("this build has CUDA: 'cuda' may open a device")
    ptd_path, manifest, _ = case_args(K01)
    with pytest.raises(RuntimeError, match="CUDA"):
        ptd.load(ptd_path, manifest=manifest, device="cuda")


def test_dir_lists_the_public_names_not_the_imports():
    import ptd
    names = dir(ptd)
    for public in ("load", "verify", "write", "extract", "reweight", "VerifyError", "Weights",
                   "DTYPES", "__version__"):
        assert public in names
    for private in ("os", "copy", "Any", "Callable", "Mapping", "Optional", "Union",
                    "annotations", "_ptd"):
        assert private not in names
    assert set(ptd.__all__) <= set(names)
