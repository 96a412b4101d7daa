"""Architecture cards -> transformers models.

A card (decodegap.core.config.ModelCard: published hyperparameters and their analytic counts) builds
the model with random bf16 weights directly on the measuring device: a decode step's time depends
on tensor shapes, not on weight values, and no hub is reachable. A card may name a local
`checkpoint` directory instead, and then real weights load from it.
"""

from __future__ import annotations

from pathlib import Path

from decodegap.core.config import ModelCard
from decodegap.core.errors import ConfigError


def hf_config(card: ModelCard):
    """The transformers config of a card's architecture."""
    from transformers import AutoConfig

    return AutoConfig.for_model(card.model_type, **dict(card.architecture))


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
                hf_config(card), dtype=dtype, attn_implementation=attn_implementation
            )
    model.eval()
    model.requires_grad_(False)
    return model
