"""Shared fixtures: the conformance cases, the ptd-verify binary, a large file."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "tests" / "data" / "conformance"
CASES = json.loads((CONFORMANCE / "cases.json").read_text())["cases"]


def case_args(case):
    """(ptd, manifest, pte) paths of a case, as strings (None when absent)."""
    p = lambda k: str(CONFORMANCE / case[k]) if case.get(k) else None  # noqa: E731
    return p("ptd"), p("manifest"), p("pte")


def ptd_verify_binary():
    """ptd-verify: $PTD_VERIFY (scripts/test.sh sets it), else build/verifier/."""
    env = os.environ.get("PTD_VERIFY")
    if env:
        return env if os.access(env, os.X_OK) else None
    b = ROOT / "build" / "verifier" / "ptd-verify"
    if os.access(b, os.X_OK):
        return str(b)
    return shutil.which("ptd-verify")


@pytest.fixture(scope="session")
def ptd_verify():
    """Runs `ptd-verify --json ARGS` and returns (exit code, parsed JSON)."""
    binary = ptd_verify_binary()
    if binary is None:
        pytest.skip("ptd-verify not found (set PTD_VERIFY or build build/verifier/ptd-verify)")

    def run(*args):
        r = subprocess.run([binary, "--json", *args], capture_output=True, text=True,
                           timeout=120)
        return r.returncode, json.loads(r.stdout)

    return run


@pytest.fixture(scope="session")
def big_file(tmp_path_factory):
    """A 64 MiB .ptd + manifest (16 distinct 4 MiB float32 weights), written by
    ptd.write: long enough to load that the GIL and progress tests see it run."""
    import numpy as np

    import ptd

    d = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(18)
    weights = {f"layers.{i}.w": rng.standard_normal((1024, 1024), dtype=np.float32)
               for i in range(16)}
    ptd.write(d / "big.ptd", d / "big.manifest", weights)
    return d / "big.ptd", d / "big.manifest", weights
