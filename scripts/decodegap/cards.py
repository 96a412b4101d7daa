"""Architecture cards: a model's published hyperparameters -> a transformers model.

A card builds the model with random bf16 weights directly on the measuring device: a decode step's
time depends on tensor shapes, not on weight values, and no hub is reachable. A card may name a
local `checkpoint` directory instead, and then real weights load from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from decodegap.errors import ConfigError

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
            if not isinstance(arch[k], int) or arch[k] <= 0:
                raise ConfigError(f"{source}: model '{key}'.architecture.{k} must be a positive integer, got {arch[k]!r}")
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

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of one token across all layers, as the KV cache stores them."""
        a = self.architecture
        return 2 * a["num_hidden_layers"] * a["num_key_value_heads"] * a["head_dim"] * dtype_bytes

    # --- transformers ------------------------------------------------------------------------
    def hf_config(self):
        from transformers import AutoConfig

        return AutoConfig.for_model(self.model_type, **dict(self.architecture))


def build_model(card: ModelCard, device: str, attn_implementation: str = "sdpa", seed: int = 0):
    """The card's model in bf16 on `device`, in eval mode with gradients off.

    Random weights are drawn on the device itself (seeded): a 7B card never takes a CPU detour.
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    dtype = torch.bfloat16
    if card.checkpoint:
        path = Path(card.checkpoint).expanduser()
        if not path.is_dir():
            raise ConfigError(f"model '{card.key}'.checkpoint: directory {path} not found")
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation=attn_implementation, device_map=device
        )
    else:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                card.hf_config(), dtype=dtype, attn_implementation=attn_implementation
            )
    model.eval()
    model.requires_grad_(False)
    return model
