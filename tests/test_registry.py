"""An attention path or a weight path is one file: dropped into its package (a copy of this
repository), a toy of each is known to the config, checked by the environment stage, named in the
environment's library list, and measured by a CPU session, with no other file touched."""

import json
import os
import shutil
import subprocess
import sys

import yaml

from conftest import FAST, REPO

TOY_ATTENTION = '''"""toy-sdpa: SDPA's math backend under another name, the test of a one-file path."""

from decodegap.measure.attention.base import MATH, AttentionPath, sdpa_call

PATH = AttentionPath("toy-sdpa", "sdpa", sdpa_call, sdpa_backend="MATH", kernels=(MATH,), families=("math",), package="pyyaml")
'''

TOY_WEIGHTS = '''"""toy-half: every decoder linear stored in float16 and cast per call, the test of a one-file path."""

from decodegap.measure.weights.base import PackedWeights


class ToyHalfWeights(PackedWeights):
    name = "toy-half"
    package = "jsonschema"

    def bytes_per_layer(self, n: int, k: int) -> int:
        return 2 * n * k

    def pack(self, linear):
        import torch

        class Half(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("weight_half", linear.weight.detach().to(torch.float16))
                self.weight_buffers = ("weight_half",)
                self.bias = linear.bias

            def forward(self, x):
                return torch.nn.functional.linear(x, self.weight_half.to(x.dtype), self.bias)

        return Half()

    def dense(self, packed, linear):
        return packed.weight_half.float()


PATH = ToyHalfWeights()
'''


def test_a_new_attention_and_weight_path_are_one_file_each(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts")
    for d in ("config", "workflow", "envs"):
        shutil.copytree(REPO / d, root / d)
    (root / "scripts/decodegap/measure/attention/toy_sdpa.py").write_text(TOY_ATTENTION)
    (root / "scripts/decodegap/measure/weights/toy_half.py").write_text(TOY_WEIGHTS)
    env = {**os.environ, "PYTHONPATH": str(root / "scripts")}

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, env=env)

    # the config knows both names, with nothing else edited
    check = run("-c", "import yaml; from decodegap.core.cells import validate_config; c = yaml.safe_load(open('config/config.yaml'));"
                      "c['matrix'].update(gpus=['cpu'], models=['tiny-llama'], ctx=[32], attn=['toy-sdpa'], quant=['toy-half']);"
                      "validate_config(c); print('ok')")
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stderr[-2000:]
    # the environment stage checks them and names their packages' versions
    stage = run("-m", "decodegap.measure.setup", "--gpu", "cpu", "--attn", "toy-sdpa", "--quant", "toy-half", "--layouts", "4/2/16",
                "--out", str(tmp_path / "env.json"), "--cache-dir", str(tmp_path / "cache"))
    assert stage.returncode == 0, stage.stderr[-3000:]
    record = json.loads((tmp_path / "env.json").read_text())
    assert record["attention"]["toy-sdpa"]["checks"]["dynamic"]["runs"] and record["weights"]["toy-half"]["runs"], record
    assert record["weights"]["toy-half"]["package"] == "jsonschema" and record["weights"]["toy-half"]["version"]
    assert "pyyaml" in record["libraries"] and "jsonschema" in record["libraries"]
    # a CPU session measures the cell and stores the weights as the path says
    session = run("-m", "decodegap.measure", "--root", str(root), "--gpu", "cpu", "--model", "tiny-llama", "--ctx", "32",
                  "--attn", "toy-sdpa", "--quant", "toy-half", "--mode", "eager", "--session", "0", *FAST)
    assert session.returncode == 0, session.stderr[-3000:]
    rec = json.loads((root / "results/raw/cpu/tiny-llama/ctx32/toy-sdpa_toy-half_eager/s00.json").read_text())
    assert rec["status"] == "valid", rec["reasons"]
    card = yaml.safe_load((REPO / "config/models.yaml").read_text())["tiny-llama"]["architecture"]
    assert rec["floor"]["weight_bytes"] < rec["floor"]["param_count"] * 4  # float16 decoder layers, not float32
    assert card["num_hidden_layers"] >= 1
