"""ptd.verify: every conformance case, against `ptd-verify --json`."""
import pytest

import ptd
from conftest import CASES, case_args


def cli_args(ptd_path, manifest, pte):
    args = [ptd_path]
    if manifest:
        args += ["--manifest", manifest]
    if pte:
        args += ["--pte", pte]
    return args


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("digest", [False, True], ids=["plain", "digest"])
def test_to_dict_equals_cli_json(case, digest, ptd_verify):
    ptd_path, manifest, _ = case_args(case)
    report = ptd.verify(ptd_path, manifest=manifest, digest=digest)
    rc, expected = ptd_verify(*cli_args(ptd_path, manifest, None),
                              *(["--digest"] if digest else []))
    assert report.to_dict() == expected
    assert report.ok == (rc == 0)
    assert report.ok == (case["expect"] == "ok")


@pytest.mark.parametrize("case", [c for c in CASES if c.get("pte")],
                         ids=[c["name"] for c in CASES if c.get("pte")])
def test_through_pte_with_sm_equals_cli_json(case, ptd_verify):
    ptd_path, _, pte = case_args(case)
    report = ptd.verify(ptd_path, pte=pte, sm=90, digest=True)
    rc, expected = ptd_verify(*cli_args(ptd_path, None, pte), "--sm", "90", "--digest")
    assert report.to_dict() == expected
    assert report.ok == (rc == 0)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_verdict_and_rules(case):
    ptd_path, manifest, _ = case_args(case)
    report = ptd.verify(ptd_path, manifest=manifest)
    if case["expect"] == "ok":
        assert report.ok and report.errors == ()
        return
    assert not report.ok
    rules = {e.rule for e in report.errors}
    assert rules & set(case["rule_ids"]), (rules, case["rule_ids"])
    for e in report.errors:
        assert e.message.endswith(f"({e.rule})")
        assert e.file in (ptd_path, manifest)
        d = e.to_dict()
        assert d["rule"] == e.rule and d["message"] == e.message
        assert e.key == d.get("key") and e.fqn == d.get("fqn")


def test_weight_diagnostic_names_fqn():
    case = next(c for c in CASES if c["name"] == "k11_truncated_clone")
    ptd_path, manifest, _ = case_args(case)
    report = ptd.verify(ptd_path, manifest=manifest)
    g2 = [e for e in report.errors if e.rule == "G2"]
    assert g2 and all(e.fqn for e in g2)
    assert g2[0].fqn in g2[0].message


def test_to_dict_is_a_copy():
    case = CASES[0]
    report = ptd.verify(case_args(case)[0])
    report.to_dict()["ok"] = "changed"
    assert report.to_dict()["ok"] is True


def test_accepts_pathlike(tmp_path):
    import pathlib

    case = CASES[0]
    p = pathlib.Path(case_args(case)[0])
    assert ptd.verify(p).to_dict()["ptd"]["path"] == str(p)


def test_hints_name_the_python_arguments():
    """A file in the wrong place: the hint names the argument that takes it, in
    Python's words (not the command line's flags)."""
    k01 = next(c for c in CASES if c["name"] == "k01_view_geometry")
    ptd_path, manifest, pte = case_args(k01)

    def hints(report):
        return [e.to_dict().get("hint") for e in report.errors if "hint" in e.to_dict()]

    # A manifest as the .ptd.
    h = hints(ptd.verify(manifest))
    assert h and h[0].endswith("(ETCUDAFQN0): pass it as manifest="), h
    # A .ptd as the manifest.
    h = hints(ptd.verify(ptd_path, manifest=ptd_path))
    assert h and h[0].endswith(": pass it as the first argument"), h
    # A .pte as the manifest.
    h = hints(ptd.verify(ptd_path, manifest=pte))
    assert h and h[0].endswith(": pass it as pte="), h
    for report in (ptd.verify(manifest), ptd.verify(ptd_path, manifest=pte)):
        assert not any("--" in x for x in hints(report))
