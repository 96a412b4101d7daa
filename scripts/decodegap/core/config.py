"""Load config/gpus.yaml and config/models.yaml, checked, with errors that name the key and file.
A model card's analytic shapes (parameter count, KV bytes per token) need no torch: both wings use them."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from decodegap.core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]  # scripts/decodegap/core/config.py
GPUS_YAML = REPO_ROOT / "config" / "gpus.yaml"
MODELS_YAML = REPO_ROOT / "config" / "models.yaml"


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


# A display name is drawn in titles, legends and table cells: longer ones make figures tens of
# thousands of pixels wide and break LaTeX's lines.
MAX_DISPLAY_NAME = 48


def check_display_name(name, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}.display_name must be a non-empty string, got {name!r}")
    if len(name) > MAX_DISPLAY_NAME:
        raise ConfigError(f"{where}.display_name has {len(name)} characters; at most {MAX_DISPLAY_NAME} (it is drawn in figures and tables)")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{where}.display_name is not valid Unicode (a lone surrogate)") from None
    return name


def finite_positive(value, where: str, allow_zero: bool = False) -> float:
    """A number that must be finite and positive (YAML's .nan and .inf pass a schema's bounds: a
    comparison with NaN is always false)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise ConfigError(f"{where} must be a finite {'non-negative' if allow_zero else 'positive'} number, got {value!r}")
    return x


def lookup(table: Mapping[str, Any], key: str, what: str, source: str | Path) -> Any:
    """table[key], or a ConfigError that lists the known keys and the closest match."""
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"unknown {what} '{key}' in {source} (known: {', '.join(sorted(table))}){hint}")


@dataclass(frozen=True)
class GpuSpec:
    key: str
    display_name: str
    b_peak_Bps: float
    device: str = "cuda"
    device_name_match: str | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None
    price_usd_per_hour: float | None = None
    price_source: str | None = None
    price_date: str | None = None
    bandwidth_source: str | None = None
    slurm: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, key: str, entry: Mapping[str, Any], source: str | Path) -> "GpuSpec":
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{source}: gpu '{key}' must be a mapping, got {type(entry).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(entry) - known
        if unknown:
            raise ConfigError(f"{source}: gpu '{key}' has unknown field(s) {sorted(unknown)} (known: {sorted(known)})")
        for required in ("display_name", "b_peak_Bps"):
            if entry.get(required) is None:
                raise ConfigError(f"{source}: gpu '{key}' lacks '{required}'")
        check_display_name(entry["display_name"], f"{source}: gpu '{key}'")
        b_peak = finite_positive(entry["b_peak_Bps"], f"{source}: gpu '{key}'.b_peak_Bps")
        if entry.get("price_usd_per_hour") is not None:
            finite_positive(entry["price_usd_per_hour"], f"{source}: gpu '{key}'.price_usd_per_hour")
        if entry.get("device", "cuda") not in ("cuda", "cpu"):
            raise ConfigError(f"{source}: gpu '{key}'.device must be 'cuda' or 'cpu', got {entry['device']!r}")
        fields = {k: v for k, v in entry.items() if v is not None and k != "key"}
        fields["b_peak_Bps"] = b_peak
        fields["slurm"] = dict(entry.get("slurm") or {})
        return cls(key=key, **fields)


def load_gpu(key: str, path: str | Path | None = None, spec_json: str | None = None) -> GpuSpec:
    """One GPU type from `path`, updated from `spec_json` (a JSON object of its fields: the
    user's merged table as the workflow passes it to every GPU job); a ConfigError names the
    bad key or the bad JSON."""
    import json

    path = path or GPUS_YAML
    try:
        overrides = {key: json.loads(spec_json)} if spec_json else None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--gpu-spec is not a JSON object: {exc}") from None
    return lookup(load_gpus(path, overrides), key, "gpu", path)


def load_gpus(path: str | Path = GPUS_YAML, overrides: Mapping[str, Any] | None = None) -> dict[str, GpuSpec]:
    """GPU table from `path`, each entry updated field by field from `overrides` (a user's config)."""
    table = load_yaml(path) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: expected a mapping of gpu keys")
    merged = {k: dict(v) if isinstance(v, Mapping) else v for k, v in table.items()}
    for key, entry in (overrides or {}).items():
        base = table.get(key) if isinstance(table.get(key), Mapping) else None
        if isinstance(entry, Mapping) and base is not None and "device" in entry and entry["device"] != base.get("device", "cuda"):
            # a session filed under a GPU type ran on a device of that type: a CPU run is never an H200's
            raise ConfigError(f"gpu '{key}'.device: {path} makes it a {base.get('device', 'cuda')!r} GPU type; an override cannot "
                              f"make it {entry['device']!r} (sessions filed under '{key}' must run on its device; add a new GPU key "
                              "for a stand-in)")
        if isinstance(entry, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **entry}
            if isinstance(entry.get("slurm"), Mapping) and isinstance(table[key].get("slurm"), Mapping):
                merged[key]["slurm"] = {**table[key]["slurm"], **entry["slurm"]}
        else:
            merged[key] = entry
    return {key: GpuSpec.from_dict(key, entry, path) for key, entry in merged.items()}


def gpu_key_of_name(device_name: str, gpus: Mapping[str, "GpuSpec"] | None = None) -> str | None:
    """The GPU type (a key of config/gpus.yaml) whose `device_name_match` the device's name contains,
    the longest match ("L40S" is not an "L4"); None for a device the table does not know."""
    name = device_name.lower()
    matches = [(len(g.device_name_match), key) for key, g in (gpus if gpus is not None else load_gpus()).items()
               if g.device_name_match and g.device_name_match.lower() in name]
    return max(matches)[1] if matches else None


def main_gpu_key(argv=None) -> int:
    """`python -m decodegap.core.config gpu-key NAME`: the GPU type of a device name (envs/lent_gpu.sh
    asks it of nvidia-smi's name), or exit 2 naming the device the table does not know."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "gpu-key":
        print("usage: python -m decodegap.core.config gpu-key DEVICE_NAME", file=sys.stderr)
        return 2
    key = gpu_key_of_name(args[1])
    if key is None:
        print(f"error: no GPU type in {GPUS_YAML} has a device_name_match that {args[1]!r} contains; add one there", file=sys.stderr)
        return 2
    print(key)
    return 0


def load_models(path: str | Path = MODELS_YAML) -> dict[str, "ModelCard"]:
    table = load_yaml(path) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: expected a mapping of model keys")
    return {key: ModelCard.from_dict(key, entry, path) for key, entry in table.items()}


# Families whose parameter layout the analytic counts below know. Adding one means adding its
# bias layout to `_attention_bias_params`; everything else is shared by Llama-style GQA decoders.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
REQUIRED_ARCHITECTURE = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
)


@dataclass(frozen=True)
class ModelCard:
    key: str
    display_name: str
    model_type: str
    architecture: Mapping[str, Any] = field(default_factory=dict)
    published_params: int | None = None
    source: str | None = None
    checkpoint: str | None = None

    @classmethod
    def from_dict(cls, key: str, entry: Mapping[str, Any], source: str | Path = "models.yaml") -> "ModelCard":
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{source}: model '{key}' must be a mapping")
        known = {"display_name", "model_type", "architecture", "published_params", "source", "checkpoint"}
        unknown = set(entry) - known
        if unknown:
            raise ConfigError(f"{source}: model '{key}' has unknown field(s) {sorted(unknown)} (known: {sorted(known)})")
        model_type = entry.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: model '{key}'.model_type is {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        arch = entry.get("architecture") or {}
        missing = [k for k in REQUIRED_ARCHITECTURE if k not in arch]
        if missing:
            raise ConfigError(f"{source}: model '{key}'.architecture lacks {missing}")
        for k in REQUIRED_ARCHITECTURE[:-1]:
            if not isinstance(arch[k], int) or isinstance(arch[k], bool) or arch[k] <= 0:
                raise ConfigError(f"{source}: model '{key}'.architecture.{k} must be a positive integer, got {arch[k]!r}")
        if not isinstance(arch["tie_word_embeddings"], bool):
            raise ConfigError(f"{source}: model '{key}'.architecture.tie_word_embeddings must be true or false, got {arch['tie_word_embeddings']!r}")
        for k, v in arch.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{source}: model '{key}'.architecture.{k} must be a finite number, got {v!r}")
        if entry.get("display_name") is not None:
            check_display_name(entry["display_name"], f"{source}: model '{key}'")
        if arch["num_attention_heads"] % arch["num_key_value_heads"]:
            raise ConfigError(f"{source}: model '{key}': num_attention_heads must be a multiple of num_key_value_heads")
        return cls(
            key=key,
            display_name=entry.get("display_name") or key,
            model_type=model_type,
            architecture=dict(arch),
            published_params=entry.get("published_params"),
            source=entry.get("source"),
            checkpoint=entry.get("checkpoint"),
        )

    # --- analytic shapes (no torch needed) -------------------------------------------------
    @property
    def tied_embeddings(self) -> bool:
        return bool(self.architecture["tie_word_embeddings"])

    def embedding_params(self) -> int:
        a = self.architecture
        return a["vocab_size"] * a["hidden_size"]

    def _attention_bias_params(self) -> int:
        a = self.architecture
        q_out = a["num_attention_heads"] * a["head_dim"]
        kv_out = a["num_key_value_heads"] * a["head_dim"]
        if self.model_type == "qwen2":  # Qwen2 always biases q, k and v; never o
            return q_out + 2 * kv_out
        if a.get("attention_bias", False):  # Llama's switch biases q, k, v and o
            return q_out + 2 * kv_out + a["hidden_size"]
        return 0

    def param_count(self) -> int:
        """Parameters of the model as released, counted from the card's shapes."""
        a = self.architecture
        hidden, heads, kv_heads, head_dim = a["hidden_size"], a["num_attention_heads"], a["num_key_value_heads"], a["head_dim"]
        attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
        attention += self._attention_bias_params()
        mlp = 3 * hidden * a["intermediate_size"] + (
            2 * a["intermediate_size"] + hidden if a.get("mlp_bias", False) else 0
        )
        norms = 2 * hidden
        per_layer = attention + mlp + norms
        head = 0 if self.tied_embeddings else self.embedding_params()
        return self.embedding_params() + a["num_hidden_layers"] * per_layer + hidden + head

    @property
    def attention_layout(self) -> str:
        """query heads/KV heads/head dim, e.g. "28/4/128": what an attention kernel's support depends on
        (the environment stage checks each configured layout)."""
        a = self.architecture
        hq = a["num_attention_heads"]
        return f"{hq}/{a['num_key_value_heads']}/{a.get('head_dim') or a['hidden_size'] // hq}"

    def ctx_problem(self, ctx: int, headroom: int = 0) -> str | None:
        """Why a cell cannot put ctx tokens (and headroom more decode steps) in this card's cache, or None."""
        limit = self.architecture["max_position_embeddings"]
        if not isinstance(ctx, int) or isinstance(ctx, bool) or ctx < 1:
            return f"ctx must be a positive integer, got {ctx!r}"
        if ctx + headroom > limit:
            return (f"ctx {ctx} (+{headroom} decode positions) is beyond {self.key}'s {limit} positions "
                    "(architecture.max_position_embeddings)")
        return None

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of one token across all layers, as the KV cache stores them."""
        a = self.architecture
        return 2 * a["num_hidden_layers"] * a["num_key_value_heads"] * a["head_dim"] * dtype_bytes


if __name__ == "__main__":
    raise SystemExit(main_gpu_key())
