"""envs/build_marlin.py on a stand-in vLLM sdist: the kernel configs cut to the one the awq-marlin path
runs, the ops registered under decodegap's library name, their schemas declared, and the layout
helpers taken by name."""

import importlib.util
import io
import tarfile

import pytest
from conftest import REPO

spec = importlib.util.spec_from_file_location("build_marlin", REPO / "envs" / "build_marlin.py")
build_marlin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_marlin)

GENERATE = '''import sys, os
THREAD_CONFIGS = [(128, 128, 256)]
QUANT_CONFIGS = [
    {"b_type": "kU4B8", "thread_configs": THREAD_CONFIGS, "thread_m_blocks": [1, 2], "group_blocks": [-1, 8]},
    {"b_type": "kFE4M3fn", "thread_configs": THREAD_CONFIGS, "thread_m_blocks": [1], "group_blocks": [8]},
]
out = sys.argv[2]
for c in QUANT_CONFIGS:
    name = "sm80_kernel_" + "_".join(c.get("a_type", ["kFloat16"])) + "_" + c["b_type"] + ".cu"
    open(os.path.join(out, name), "w").write(repr(c))
'''
BINDINGS = '''TORCH_LIBRARY(_C, ops) {
  ops.def(
      "marlin_gemm(Tensor a, Tensor workspace, "
      "int b_type_id) -> Tensor");
  ops.def("other_op(Tensor a) -> Tensor");
  ops.def(
      "gptq_marlin_repack(Tensor b_q_weight, int num_bits) -> Tensor");
  ops.def(
      "awq_marlin_repack(Tensor b_q_weight, int num_bits) -> Tensor");
}
'''
QUANT_UTILS = "import numpy\n\ndef get_pack_factor(b):\n    return 32 // b\n\n\ndef pack_cols(q, b, k, n):\n    return get_pack_factor(b)\n\n\ndef unpack_cols(p, b, k, n):\n    return p\n\n\ndef unrelated():\n    import vllm\n"
MARLIN_UTILS = ("from vllm.platforms import current_platform\n\n"
                + "".join(f"def {f}(*a):\n    return '{f}'\n\n\n" for f in ("get_scale_perms", "marlin_permute_scales", "marlin_zero_points",
                                                                            "awq_to_marlin_zero_points", "marlin_make_workspace_new")))


def _sdist(path):
    files = {
        "csrc/quantization/marlin/marlin.cu": "STABLE_TORCH_LIBRARY_IMPL(_C, CUDA, m) { m.impl(\"marlin_gemm\", &f); }\n",
        "csrc/quantization/marlin/awq_marlin_repack.cu": "STABLE_TORCH_LIBRARY_IMPL(_C, CUDA, m) {}\n",
        "csrc/quantization/marlin/gptq_marlin_repack.cu": "STABLE_TORCH_LIBRARY_IMPL(_C, CUDA, m) {}\n",
        "csrc/quantization/marlin/sm80_kernel_float16_u4b8_float16.cu": "// a kernel vLLM generated for every type\n",
        "csrc/quantization/marlin/generate_kernels.py": GENERATE,
        "csrc/core/scalar_type.hpp": "// header\n",
        "csrc/torch_utils.h": "// header\n",
        "csrc/quantization/gptq/q_gemm.cu": "// not Marlin\n",
        "csrc/torch_bindings.cpp": BINDINGS,
        "vllm/model_executor/layers/quantization/utils/quant_utils.py": QUANT_UTILS,
        "vllm/model_executor/layers/quantization/utils/marlin_utils.py": MARLIN_UTILS,
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-0.33.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_the_build_lays_out_one_kernel_config_the_library_and_the_layout_helpers(tmp_path, monkeypatch):
    sdist, out = tmp_path / "vllm-0.33.0.tar.gz", tmp_path / "marlin"
    _sdist(sdist)
    monkeypatch.setattr("sys.argv", ["build_marlin.py", str(sdist), str(out)])
    assert build_marlin.main() == 0
    marlin = out / "csrc" / "quantization" / "marlin"
    kernels = sorted(p.name for p in marlin.glob("sm*_kernel_*.cu"))
    assert kernels == ["sm80_kernel_kBFloat16_kU4.cu"]  # vLLM's own generator, given only the bf16 uint4 group-128 config
    assert "'group_blocks': [8]" in (marlin / kernels[0]).read_text() and "'thread_m_blocks': [0.5, 1, 2, 3, 4]" in (marlin / kernels[0]).read_text()
    assert "STABLE_TORCH_LIBRARY_IMPL(decodegap_marlin, CUDA, m)" in (marlin / "marlin.cu").read_text()
    assert not (out / "csrc" / "quantization" / "gptq").exists() and (out / "csrc" / "core" / "scalar_type.hpp").exists()
    bind = (out / "bind.cpp").read_text()
    assert "STABLE_TORCH_LIBRARY(decodegap_marlin, ops)" in bind and "other_op" not in bind
    for op in ("marlin_gemm(Tensor a, Tensor workspace, ", "gptq_marlin_repack(Tensor b_q_weight", "awq_marlin_repack(Tensor b_q_weight"):
        assert op in bind
    spec = importlib.util.spec_from_file_location("layout", out / "marlin_layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)  # runs without vllm: only the named functions were taken
    assert layout.marlin_permute_scales() == "marlin_permute_scales" and layout.pack_cols(None, 4, 0, 0) == 8
    assert not hasattr(layout, "unrelated") and not hasattr(layout, "marlin_make_workspace_new")


def test_a_tarball_without_marlin_is_refused(tmp_path):
    sdist = tmp_path / "other.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("other-1.0/setup.py")
        info.size = 0
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(SystemExit, match="not a vLLM sdist with Marlin"):
        build_marlin.extract(sdist, tmp_path / "out")
