#!/usr/bin/env python3
"""Writes the seed corpora of the load and datamap fuzz targets.

load: each input of the weights corpus (u32 LE manifest length, .ptd,
manifest) once as it is and once per option bit of load_fuzz.cc's framing
(no manifest, staging, small reads, subset, the ExecuTorch entry point, and
a staging run with a failing copy), so that every path starts covered.
datamap: the .ptd files the executorch tests run (layouts, shared segments).

Reproducible: the same inputs give the same bytes. Run from anywhere:
  tests/fuzz/make_seeds.py
"""
import pathlib
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"

# Bits 16.. of the leading word (see tests/fuzz/load_fuzz.cc).
NO_MANIFEST, STAGING, SMALL_READS, FAULT, SUBSET, EXECUTORCH = (1 << b for b in range(16, 22))
FAULT_COPY = 2 << 22
VARIANTS = {
    "plain": 0,
    "nomanifest": NO_MANIFEST,
    "staging": STAGING | SMALL_READS,
    "small": SMALL_READS,
    "subset": SUBSET | STAGING,
    "executorch": EXECUTORCH | SMALL_READS,
    "faultcopy": STAGING | FAULT | FAULT_COPY | (1 << 24),  # The 2nd copy fails.
}


def main():
    out = CORPUS / "load"
    out.mkdir(exist_ok=True)
    for src in sorted((CORPUS / "weights").glob("*.bin")):
        data = src.read_bytes()
        (length,) = struct.unpack_from("<I", data)
        for name, bits in VARIANTS.items():
            word = (length & 0xFFFF) | bits
            (out / f"{src.stem}.{name}.bin").write_bytes(struct.pack("<I", word) + data[4:])
    dm = CORPUS / "datamap"
    dm.mkdir(exist_ok=True)
    for src in sorted((ROOT / "tests" / "data" / "executorch").glob("*.ptd")):
        shutil.copyfile(src, dm / src.name)


if __name__ == "__main__":
    main()
