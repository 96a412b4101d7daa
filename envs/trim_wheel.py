"""Drop files a measurement never uses from a wheel, so it fits a lent GPU's per-call transfer.

    python envs/trim_wheel.py IN.whl OUT_DIR --preset flashinfer-decode
    python envs/trim_wheel.py IN.whl OUT_DIR --drop 'pkg/data/.*' --keep 'pkg/data/needed\\.h'

Paths are matched against the wheel's member names with Python regular expressions (fullmatch): a
member is dropped when a --drop pattern matches and no --keep pattern does. The wheel's RECORD loses
the rows of dropped files and keeps every other row (hash and size) as it was, so pip installs the
result as it would the original. OUT_DIR gets a wheel of the same file name. Nothing is rebuilt or
changed: the kept files are the published ones, byte for byte.

Preset `flashinfer-decode` (envs/README.md): flashinfer-python 0.7.0.post1 keeps what its
single-request decode kernel needs to JIT-build (Python code, its headers, libcudacxx, the decode
sources) and drops the CUDA sources of every other kernel, CUTLASS, spdlog and CCCL's cub/thrust:
32.1 MiB to 10.8 MiB, checked by building the decode module for sm_90 with nvcc 13.0.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

PRESETS = {
    "flashinfer-decode": {
        "drop": [r"flashinfer/data/csrc/.+/.*", r"flashinfer/data/csrc/[^/]+\.cu", r"flashinfer/data/cutlass/.*",
                 r"flashinfer/data/spdlog/.*", r"flashinfer/data/cccl/(cub|thrust|python|ci|benchmarks|docs)/.*"],
        "keep": [r"flashinfer/data/csrc/[^/]*decode[^/]*\.cu"],
    },
    # bitsandbytes ships one library per CUDA, ROCm and XPU version: a CUDA-13 torch loads only cuda130
    "bitsandbytes-cuda13": {
        "drop": [r"bitsandbytes/libbitsandbytes_(cuda1[0-2]\d|rocm\d+|xpu\d+)\.so"],
        "keep": [],
    },
}


def trim(src: Path, out_dir: Path, drop: list[str], keep: list[str]) -> tuple[Path, int, int]:
    """Write the trimmed wheel; return its path, and the number of members dropped and kept."""
    drop_re, keep_re = [re.compile(p) for p in drop], [re.compile(p) for p in keep]

    def dropped(name: str) -> bool:
        return any(r.fullmatch(name) for r in drop_re) and not any(r.fullmatch(name) for r in keep_re)

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / src.name
    if out.resolve() == src.resolve():
        raise SystemExit(f"{out}: would overwrite the input wheel; pick another OUT_DIR")
    n_drop = n_keep = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        names = zin.namelist()
        gone = {n for n in names if dropped(n)}
        for info in zin.infolist():
            name = info.filename
            if name in gone:
                n_drop += 1
                continue
            data = zin.read(name)
            if name.endswith(".dist-info/RECORD"):  # the rows of the files that remain, untouched
                rows = [row for row in data.decode().splitlines() if row.split(",", 1)[0] not in gone]
                data = ("\n".join(rows) + "\n").encode()
            zout.writestr(info, data)
            n_keep += 1
    return out, n_drop, n_keep


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--preset", choices=sorted(PRESETS), default=None)
    p.add_argument("--drop", action="append", default=[], help="regular expression of member names to drop")
    p.add_argument("--keep", action="append", default=[], help="regular expression of member names never to drop")
    a = p.parse_args(argv)
    drop, keep = list(a.drop), list(a.keep)
    if a.preset:
        drop += PRESETS[a.preset]["drop"]
        keep += PRESETS[a.preset]["keep"]
    if not drop:
        p.error("nothing to drop: give --preset or --drop")
    out, n_drop, n_keep = trim(a.wheel, a.out_dir, drop, keep)
    mib = lambda f: f.stat().st_size / 2**20  # noqa: E731
    print(f"{out}: {mib(a.wheel):.1f} MiB -> {mib(out):.1f} MiB ({n_drop} files dropped, {n_keep} kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
