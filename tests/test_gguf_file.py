"""A card as a GGUF file with random weights (decodegap.measure.engines.gguf_file): llama.cpp's tensor
names and shapes for every card, the parameter count of the released checkpoint, the bytes a
decode step reads counted from the file, and no file ever overwritten."""

import math

import pytest

from decodegap.core.config import load_models

MODELS = load_models()


@pytest.mark.parametrize("key", ["qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b"])
def test_each_paper_card_has_the_released_checkpoints_parameters(key):
    from decodegap.measure.engines.gguf_file import tensor_specs

    card = MODELS[key]
    specs = tensor_specs(card)
    assert sum(math.prod(shape) for _, shape, _ in specs) == card.published_params
    names = {n for n, _, _ in specs}
    layers = card.architecture["num_hidden_layers"]
    assert {"token_embd.weight", "output_norm.weight", "output.weight", f"blk.{layers - 1}.ffn_down.weight"} <= names
    assert (f"blk.0.attn_q.bias" in names) == (card.model_type == "qwen2")  # Qwen2 attention carries q/k/v biases


@pytest.mark.parametrize("key", ["tiny-llama", "tiny-qwen"])
def test_the_written_file_reads_back_with_the_cards_shapes_and_step_bytes(tmp_path, key):
    import gguf

    from decodegap.measure.engines.gguf_file import stored_bytes, tensor_specs, write_gguf

    card = MODELS[key]
    out = write_gguf(card, tmp_path / f"{key}.gguf", seed=3)
    reader = gguf.GGUFReader(out["path"])
    shapes = {t.name: tuple(int(x) for x in reversed(t.shape)) for t in reader.tensors}
    assert shapes == {n: s for n, s, _ in tensor_specs(card)}
    assert out["param_count"] == card.param_count()
    a = card.architecture
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == ("qwen2" if card.model_type == "qwen2" else "llama")
    heads = reader.fields[f"{'qwen2' if card.model_type == 'qwen2' else 'llama'}.attention.head_count_kv"]
    assert int(heads.parts[heads.data[0]][0]) == a["num_key_value_heads"]
    # a step reads every tensor as stored but the embedding table, of which one row (float16 matrices,
    # float32 norms); with tied embeddings (tiny-qwen) the table is the output layer too, read whole
    counted = stored_bytes(out["path"])
    tied = bool(a.get("tie_word_embeddings"))
    assert counted["tied_embeddings"] is tied and ("output.weight" in [n for n, _, _ in tensor_specs(card)]) is not tied
    matrices = sum(math.prod(s) for n, s, m in tensor_specs(card) if m and (tied or n != "token_embd.weight"))
    vectors = sum(math.prod(s) for n, s, m in tensor_specs(card) if not m)
    row = 0 if tied else 2 * a["hidden_size"]
    assert counted["step_weight_bytes"] == out["step_weight_bytes"] == 2 * matrices + 4 * vectors + row
    assert counted["types"] == ["F16", "F32"] and counted["file_bytes"] == out["file_bytes"] > counted["tensor_bytes"]


def test_a_file_is_written_once_and_bad_input_names_the_problem(tmp_path):
    from decodegap.core.config import ModelCard
    from decodegap.measure.engines.gguf_file import write_gguf

    card = MODELS["tiny-llama"]
    path = tmp_path / "m.gguf"
    first = write_gguf(card, path, seed=0)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="written once"):
        write_gguf(card, path, seed=1)
    assert path.read_bytes() == before and first["file_bytes"] == len(before)
    with pytest.raises(ValueError, match="q4_0.*quantizer"):
        write_gguf(card, tmp_path / "q.gguf", file_type="q4_0")
    other = ModelCard(**{**vars(card), "model_type": "gemma3"})
    with pytest.raises(ValueError, match="gemma3.*no GGUF writer"):
        write_gguf(other, tmp_path / "g.gguf")
    assert not list(tmp_path.glob("*.partial"))


def test_the_gguf_cache_makes_room_by_removing_other_cards_files_least_recently_used_first(tmp_path, monkeypatch):
    """A lent GPU's disk holds about two cards' three formats: before writing, the cache removes a
    write's stale partial file, then other cards' cached files, least recently used first, until the
    new ones fit; never a file a session holds, one it is asked to keep, or a file it did not name
    (<card>-<format>.gguf); and nothing at all when even that would not make room."""
    import collections
    import os
    import shutil

    from decodegap.core.errors import CellNotPossible
    from decodegap.measure.engines import llamacpp

    for i, name in enumerate(["a-f16.gguf", "b-f16.gguf", "c-q8_0.gguf", "keep-f16.gguf", "my-own-model.gguf"]):
        (tmp_path / name).write_bytes(b"x" * 1000)
        os.utime(tmp_path / name, (1000 + i, 1000 + i))
    (tmp_path / "d-q4_0.gguf.partial").write_bytes(b"x" * 1000)
    Usage = collections.namedtuple("Usage", "total used free")

    def usage(path):  # a 7000-byte disk holding only these files
        used = sum(p.stat().st_size for p in tmp_path.iterdir() if p.is_file())
        return Usage(7000, used, 7000 - used)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    monkeypatch.setattr(llamacpp, "SPARE_BYTES", 0)
    said = []
    with pytest.raises(CellNotPossible, match="need 0.0 GB"):  # 2000 free + 3000 removable < 5500: nothing goes
        llamacpp._make_room(tmp_path, {"keep-f16.gguf"}, 5500, said.append)
    assert len(list(tmp_path.glob("*.gguf"))) == 5
    held = llamacpp.hold(tmp_path / "a-f16.gguf")  # a session reads a's file meanwhile
    llamacpp._make_room(tmp_path, {"keep-f16.gguf"}, 3500, said.append)
    held.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-f16.gguf", "keep-f16.gguf", "my-own-model.gguf"]
    assert [s.split()[3].strip(",") for s in said] == ["d-q4_0.gguf.partial", "b-f16.gguf", "c-q8_0.gguf"]
