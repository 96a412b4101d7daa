"""envs/trim_wheel.py: a wheel loses exactly the members its patterns name, and its RECORD loses
exactly their rows, so pip still installs it."""

import importlib.util
import zipfile

from conftest import REPO

spec = importlib.util.spec_from_file_location("trim_wheel", REPO / "envs" / "trim_wheel.py")
trim_wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trim_wheel)


def test_the_flashinfer_preset_keeps_the_decode_sources_and_their_record_rows(tmp_path):
    names = ["flashinfer/__init__.py", "flashinfer/data/csrc/single_decode.cu", "flashinfer/data/csrc/single_prefill.cu",
             "flashinfer/data/csrc/tvm_ffi_utils.h", "flashinfer/data/csrc/kda/x_decode.cu", "flashinfer/data/cutlass/include/a.h",
             "flashinfer/data/cccl/libcudacxx/include/b.h", "flashinfer/data/cccl/thrust/c.h", "flashinfer/data/include/d.cuh"]
    wheel = tmp_path / "in" / "flashinfer_python-0.7.0.post1-py3-none-any.whl"
    wheel.parent.mkdir()
    record = "".join(f"{n},sha256=x,1\n" for n in names) + "flashinfer_python-0.7.0.post1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for n in names:
            z.writestr(n, "x")
        z.writestr("flashinfer_python-0.7.0.post1.dist-info/RECORD", record)
    preset = trim_wheel.PRESETS["flashinfer-decode"]
    out, dropped, kept = trim_wheel.trim(wheel, tmp_path / "out", preset["drop"], preset["keep"])
    with zipfile.ZipFile(out) as z:
        left = set(z.namelist())
        rows = z.read("flashinfer_python-0.7.0.post1.dist-info/RECORD").decode().splitlines()
    assert out.name == wheel.name and (dropped, kept) == (4, 6)
    assert left == {"flashinfer/__init__.py", "flashinfer/data/csrc/single_decode.cu", "flashinfer/data/csrc/tvm_ffi_utils.h",
                    "flashinfer/data/cccl/libcudacxx/include/b.h", "flashinfer/data/include/d.cuh",
                    "flashinfer_python-0.7.0.post1.dist-info/RECORD"}
    assert {r.split(",")[0] for r in rows} == left  # every remaining file keeps its row, no row is left dangling


def test_the_bitsandbytes_preset_keeps_only_what_a_cuda13_torch_loads(tmp_path):
    libs = ["cuda118", "cuda128", "cuda130", "cuda132", "rocm64", "xpu2026", "cpu"]
    names = ["bitsandbytes/__init__.py"] + [f"bitsandbytes/libbitsandbytes_{lib}.so" for lib in libs]
    wheel = tmp_path / "in" / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        for n in names:
            z.writestr(n, "x")
    preset = trim_wheel.PRESETS["bitsandbytes-cuda13"]
    out, dropped, kept = trim_wheel.trim(wheel, tmp_path / "out", preset["drop"], preset["keep"])
    with zipfile.ZipFile(out) as z:
        left = set(z.namelist())
    assert left == {"bitsandbytes/__init__.py", "bitsandbytes/libbitsandbytes_cuda130.so", "bitsandbytes/libbitsandbytes_cuda132.so",
                    "bitsandbytes/libbitsandbytes_cpu.so"}
