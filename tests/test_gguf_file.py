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


def test_a_file_names_its_card_seed_and_writer_and_anything_else_is_named_for_what_it_is(tmp_path):
    """identity_problem: the cache's guard against a file that is not the card's (a renamed copy of
    another card's file, other weights, a copy cut short, a file that is not GGUF or not ours)."""
    import shutil

    import gguf

    from decodegap.measure.engines.gguf_file import WRITER, identity_problem, write_gguf

    llama, qwen = MODELS["tiny-llama"], MODELS["tiny-qwen"]
    F16, F32 = 1, 0
    path = tmp_path / "tiny-llama-f16.gguf"
    write_gguf(llama, path, seed=0)
    assert identity_problem(path, llama, F16, 0) is None
    assert "decodegap.seed is 0, not 7" in identity_problem(path, llama, F16, 7)
    assert "general.file_type is 1, not 0" in identity_problem(path, llama, F32, 0)
    other = tmp_path / "renamed.gguf"  # another card's file under this card's name
    write_gguf(qwen, other, seed=0)
    assert "decodegap.card is 'tiny-qwen', not 'tiny-llama'" in identity_problem(other, llama, F16, 0)
    from decodegap.core.config import ModelCard

    wider = ModelCard(**{**vars(llama), "architecture": {**llama.architecture, "intermediate_size": 2 * llama.architecture["intermediate_size"]}})
    assert "decodegap.card_sha256" in identity_problem(path, wider, F16, 0)  # the card changed since the file was made
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size - 1000])
    assert identity_problem(cut, llama, F16, 0).startswith(("not a readable GGUF file", "it is cut short"))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 100)
    assert identity_problem(junk, llama, F16, 0).startswith("not a readable GGUF file")
    bare = tmp_path / "bare.gguf"  # GGUF, with the card's tensors, but not written by decodegap
    w = gguf.GGUFWriter(str(bare), "llama")
    w.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 4), dtype="float16"))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    assert f"not written by {WRITER}" in identity_problem(bare, llama, F16, 0)
    shutil.copy(path, tmp_path / "copy.gguf")
    assert identity_problem(tmp_path / "copy.gguf", llama, F16, 0) is None  # a whole copy is the same file


def test_the_gguf_cache_makes_a_file_that_is_not_the_cards_again_and_says_why(tmp_path, monkeypatch):
    """A cached file that is not the card's is made again (the record keeps why), one a session holds
    meanwhile makes the cell invalid and stays as it is, and a good cached file is used as it is."""
    from decodegap.core.errors import CellNotPossible
    from decodegap.measure.engines import llamacpp
    from decodegap.measure.engines.gguf_file import identity_problem, write_gguf

    monkeypatch.setenv("DECODEGAP_GGUF_DIR", str(tmp_path))
    llama = MODELS["tiny-llama"]
    write_gguf(MODELS["tiny-qwen"], tmp_path / "tiny-llama-f16.gguf", seed=0)  # another card's file under this card's name
    held = llamacpp.hold(tmp_path / "tiny-llama-f16.gguf")
    before = (tmp_path / "tiny-llama-f16.gguf").read_bytes()
    with pytest.raises(CellNotPossible, match="tiny-llama-f16.gguf: not tiny-llama's f16.gguf file.*decodegap.card is 'tiny-qwen'.*holds it"):
        llamacpp.gguf_for(llama, "f16")
    held.close()
    assert (tmp_path / "tiny-llama-f16.gguf").read_bytes() == before
    said = []
    info, held = llamacpp.gguf_for(llama, "f16", log=said.append)
    held.close()
    assert "decodegap.card is 'tiny-qwen'" in info["made_in_session"]["replaced"]["tiny-llama-f16.gguf"]
    assert info["made_in_session"]["write"]["seed"] == 0 and any("making it again" in s for s in said)
    assert identity_problem(tmp_path / "tiny-llama-f16.gguf", llama, 1, 0) is None
    info, held = llamacpp.gguf_for(llama, "f16")
    held.close()
    assert info["made_in_session"] is None  # now the card's own: used as it is
