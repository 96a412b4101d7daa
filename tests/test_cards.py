"""Cards reproduce the published models: parameter counts, KV bytes, and the models they build."""

import pytest
import torch

from decodegap.core.config import ModelCard
from decodegap.measure.cards import build_model
from decodegap.core.config import load_models
from decodegap.core.errors import ConfigError

MODELS = load_models()

# Released checkpoints' parameter counts (safetensors metadata of the hub repositories).
PUBLISHED = {"qwen2.5-7b": 7_615_616_512, "mistral-7b-v0.3": 7_248_023_552, "llama-3.1-8b": 8_030_261_248}
# 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (bf16), worked out by hand.
KV_BYTES_PER_TOKEN = {"qwen2.5-7b": 2 * 28 * 4 * 128 * 2, "mistral-7b-v0.3": 2 * 32 * 8 * 128 * 2, "llama-3.1-8b": 2 * 32 * 8 * 128 * 2}


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_real_cards_match_published_parameter_counts(key):
    card = MODELS[key]
    assert card.param_count() == PUBLISHED[key] == card.published_params


@pytest.mark.parametrize("key", sorted(KV_BYTES_PER_TOKEN))
def test_kv_bytes_per_token(key):
    assert MODELS[key].kv_bytes_per_token() == KV_BYTES_PER_TOKEN[key]
    assert KV_BYTES_PER_TOKEN["qwen2.5-7b"] == 57_344 and KV_BYTES_PER_TOKEN["llama-3.1-8b"] == 131_072


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_real_cards_build_the_published_shapes_without_allocating(key):
    # The meta device builds the full 7-8B module tree without memory: the count transformers
    # builds must equal the card's analytic count, so W on the GPU is the published model's W.
    card = MODELS[key]
    model = build_model(card, "meta")
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[key]
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA


@pytest.mark.parametrize("key", ["tiny-llama", "tiny-qwen"])
def test_tiny_cards_build_bf16_models_matching_their_counts(key):
    card = MODELS[key]
    model = build_model(card, "cpu", seed=1)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert sum(p.numel() for p in model.parameters()) == card.param_count()
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_same_seed_same_weights_other_seed_other_weights():
    card = MODELS["tiny-llama"]
    a, b, c = (build_model(card, "cpu", seed=s) for s in (3, 3, 4))
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_checkpoint_card_loads_real_weights(tmp_path):
    card = MODELS["tiny-qwen"]
    saved = build_model(card, "cpu", seed=7)
    saved.save_pretrained(tmp_path / "ckpt")
    entry = {"display_name": "ckpt", "model_type": card.model_type, "architecture": dict(card.architecture), "checkpoint": str(tmp_path / "ckpt")}
    loaded = build_model(ModelCard.from_dict("from-ckpt", entry), "cpu", seed=99)
    for (name, p), q in zip(saved.named_parameters(), loaded.parameters()):
        assert torch.equal(p, q), name


def test_missing_checkpoint_names_the_card(tmp_path):
    card = MODELS["tiny-qwen"]
    entry = {"display_name": "x", "model_type": card.model_type, "architecture": dict(card.architecture), "checkpoint": str(tmp_path / "nope")}
    with pytest.raises(ConfigError, match="from-ckpt.*not found"):
        build_model(ModelCard.from_dict("from-ckpt", entry), "cpu")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "gpt2"}, "model_type is 'gpt2'"),
        ({"architecture": {"vocab_size": 10}}, "lacks"),
        ({"typo_field": 1}, "unknown field"),
    ],
)
def test_bad_cards_fail_naming_the_card(change, message):
    entry = {"display_name": "x", "model_type": "llama", "architecture": dict(MODELS["tiny-llama"].architecture), **change}
    with pytest.raises(ConfigError, match=message) as err:
        ModelCard.from_dict("my-card", entry, "models.yaml")
    assert "my-card" in str(err.value)
