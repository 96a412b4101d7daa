"""A model card's shapes as a GGUF file with random weights, for llama.cpp.

No checkpoint can be downloaded, so an engine that reads GGUF gets one written from the card
(config/models.yaml): llama.cpp's tensor names and metadata for its `llama` architecture (Llama,
Mistral) or `qwen2` (q/k/v biases), matrices as float16 (or float32) with random values, the 1-D
norms and biases float32 as llama.cpp's own converter writes them, and a placeholder vocabulary of
`vocab_size` tokens (the session feeds token ids; it never tokenizes text). Step time depends on
shapes and storage format, not on values. The 8- and 4-bit formats are made from this file by
llama.cpp's own quantizer.

Differences from a converted checkpoint that do not change a decode step's bytes or kernels: q and
k are not permuted for llama.cpp's RoPE layout (random weights either way), and Llama-3.1's RoPE
frequency scaling table is left out (it changes the rotation's angles, not its cost).

`write_gguf` streams tensor by tensor (a 7-8B card is 15-16 GB at float16), and returns what the
record keeps: the path, the file's bytes, tensor and parameter counts, and the bytes a decode step
reads (every tensor as stored but the token embedding table, of which a step reads one row).

Every file names what it is in its metadata (`identity`: the card's key and a digest of its
architecture, the seed, this writer's version), which llama.cpp's quantizer copies into the files it
makes; `identity_problem` reads that back, with the tensors' names and shapes, the file type and
the file's length, so that a machine's cache never hands a session a file that is not the card's
(another card's, an older writer's, a truncated copy, a file put there by hand).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}  # transformers model_type -> llama.cpp architecture
FILE_TYPES = {"f32": 0, "f16": 1}  # llama.cpp's LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16
INIT_STD = 0.02
WRITER = "decodegap.gguf_file/1"  # a change to what a card's file holds gets a new version: cached files are then made again
OWN_WEIGHTS_SEED = -1  # the decodegap.seed of a file holding a transformers model's own weights, not random ones


def card_digest(card) -> str:
    """sha256 of what the file is made from: the card's model type and architecture."""
    return hashlib.sha256(json.dumps({"model_type": card.model_type, "architecture": card.architecture},
                                     sort_keys=True).encode()).hexdigest()


def identity(card, seed: int) -> dict:
    """The metadata by which a GGUF file says which card and weights it holds, and who wrote it."""
    return {"decodegap.card": card.key, "decodegap.card_sha256": card_digest(card), "decodegap.seed": int(seed),
            "decodegap.writer": WRITER}


def tensor_specs(card) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape, is a matrix) of every tensor llama.cpp loads for the card, in file order."""
    a = card.architecture
    arch = ARCH.get(card.model_type)
    if arch is None:
        raise ValueError(f"model card '{card.key}': model_type '{card.model_type}' has no GGUF writer "
                         f"(known: {', '.join(sorted(ARCH))})")
    d, hd, inter, vocab = a["hidden_size"], a.get("head_dim") or a["hidden_size"] // a["num_attention_heads"], a["intermediate_size"], a["vocab_size"]
    q, kv = a["num_attention_heads"] * hd, a["num_key_value_heads"] * hd
    specs = [("token_embd.weight", (vocab, d), True)]
    for i in range(a["num_hidden_layers"]):
        b = f"blk.{i}."
        specs += [(b + "attn_norm.weight", (d,), False), (b + "attn_q.weight", (q, d), True), (b + "attn_k.weight", (kv, d), True),
                  (b + "attn_v.weight", (kv, d), True)]
        if arch == "qwen2" or a.get("attention_bias"):
            specs += [(b + "attn_q.bias", (q,), False), (b + "attn_k.bias", (kv,), False), (b + "attn_v.bias", (kv,), False)]
        specs += [(b + "attn_output.weight", (d, q), True), (b + "ffn_norm.weight", (d,), False), (b + "ffn_gate.weight", (inter, d), True),
                  (b + "ffn_up.weight", (inter, d), True), (b + "ffn_down.weight", (d, inter), True)]
    specs.append(("output_norm.weight", (d,), False))
    if not a.get("tie_word_embeddings"):
        specs.append(("output.weight", (vocab, d), True))
    return specs


_HF = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_HF_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
             "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
             "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
             "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}


def transformers_name(name: str) -> str:
    """The transformers parameter a GGUF tensor holds (llama.cpp's converter's mapping)."""
    if name in _HF:
        return _HF[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{_HF_LAYER[rest]}"


def _rope_permute(w, n_head: int):
    """transformers' rotate-half q/k rows in the interleaved order llama.cpp's `llama` RoPE reads
    (convert_hf_to_gguf.py's permute); `qwen2` uses the rotate-half (NeoX) order as it is."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _metadata(writer, card, file_type: str, seed: int) -> None:
    import gguf

    for key, value in identity(card, seed).items():
        (writer.add_int32 if isinstance(value, int) else writer.add_string)(key, value)

    a = card.architecture
    hd = a.get("head_dim") or a["hidden_size"] // a["num_attention_heads"]
    writer.add_name(card.key)
    writer.add_context_length(a["max_position_embeddings"])
    writer.add_embedding_length(a["hidden_size"])
    writer.add_block_count(a["num_hidden_layers"])
    writer.add_feed_forward_length(a["intermediate_size"])
    writer.add_head_count(a["num_attention_heads"])
    writer.add_head_count_kv(a["num_key_value_heads"])
    writer.add_key_length(hd)
    writer.add_value_length(hd)
    writer.add_rope_dimension_count(hd)
    writer.add_rope_freq_base(float((a.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(a["rms_norm_eps"]))
    writer.add_vocab_size(a["vocab_size"])
    writer.add_file_type(FILE_TYPES[file_type])
    # a placeholder SentencePiece-style vocabulary: <unk>, <s>, </s>, then one token per id
    vocab = a["vocab_size"]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"<t{i}>" for i in range(3, vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([int(gguf.TokenType.UNKNOWN), int(gguf.TokenType.CONTROL), int(gguf.TokenType.CONTROL)]
                           + [int(gguf.TokenType.NORMAL)] * (vocab - 3))
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)


def write_gguf(card, path, *, seed: int = 0, file_type: str = "f16", device: str = "cpu", state_dict=None, log=None) -> dict:
    """Write the card as a GGUF file at `path` (refusing to overwrite one) with random weights drawn
    on `device` (torch; the GPU draws a 7-8B card in seconds), or with a transformers model's own
    (`state_dict`: the tests check that llama.cpp then decodes the same tokens), and return what a
    record keeps."""
    import gguf
    import numpy as np
    import torch

    if file_type not in FILE_TYPES:
        raise ValueError(f"GGUF file type '{file_type}': one of {', '.join(FILE_TYPES)} (quantized types come from llama.cpp's quantizer)")
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path}: exists; a GGUF file is written once")
    say = log or (lambda msg: None)
    t0 = time.perf_counter()
    a = card.architecture
    specs = tensor_specs(card)
    mat_dtype = np.float16 if file_type == "f16" else np.float32
    raw = {np.float16: gguf.GGMLQuantizationType.F16, np.float32: gguf.GGMLQuantizationType.F32}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:  # a write that fails leaves no partial file of up to 16 GB behind
        writer = gguf.GGUFWriter(str(tmp), ARCH[card.model_type])
        _metadata(writer, card, file_type, seed if state_dict is None else OWN_WEIGHTS_SEED)
        for name, shape, matrix in specs:
            dt = mat_dtype if matrix else np.float32
            writer.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize, raw_dtype=raw[dt])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        gen = torch.Generator(device=device).manual_seed(seed)
        params = step_bytes = 0
        for i, (name, shape, matrix) in enumerate(specs):
            dt = mat_dtype if matrix else np.float32
            if state_dict is not None:
                values = state_dict[transformers_name(name) if not (name == "output.weight" and a.get("tie_word_embeddings"))
                                    else "model.embed_tokens.weight"].detach().float()
                if ARCH[card.model_type] == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
                    values = _rope_permute(values, a["num_attention_heads"] if "attn_q" in name else a["num_key_value_heads"])
            elif matrix:
                values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).mul_(INIT_STD)
            elif name.endswith(".bias"):
                values = torch.zeros(shape, device=device)
            else:
                values = torch.ones(shape, device=device)  # RMSNorm weights, as a fresh model has them
            array = values.to(torch.float16 if dt is np.float16 else torch.float32).cpu().numpy()
            writer.write_tensor_data(array)
            params += array.size
            if name != "token_embd.weight" or a.get("tie_word_embeddings"):  # tied: the output layer reads it whole
                step_bytes += array.nbytes
            if i % 50 == 0:
                say(f"gguf: {i + 1}/{len(specs)} tensors ({time.perf_counter() - t0:.0f} s)")
        writer.close()
        tmp.rename(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if not a.get("tie_word_embeddings"):
        step_bytes += a["hidden_size"] * np.dtype(mat_dtype).itemsize  # the one embedding row a step reads
    out = {"path": path.as_posix(), "file_bytes": path.stat().st_size, "tensors": len(specs), "param_count": params,
           "file_type": file_type, "step_weight_bytes": step_bytes, "seed": seed, "write_s": round(time.perf_counter() - t0, 2)}
    say(f"gguf: wrote {path} ({out['file_bytes'] / 1e9:.2f} GB, {params / 1e9:.3f} B params) in {out['write_s']:.1f} s")
    return out


def stored_bytes(path) -> dict:
    """What a decode step of the GGUF file at `path` reads, counted from the file: every tensor as
    stored but the token embedding table, plus one row of it (the step's token); with tied
    embeddings (no output.weight) the table is the output layer too, and read whole."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    emb = by_name["token_embd.weight"]
    rows = int(emb.shape[-1])  # GGUF shapes are ggml's ne: (columns, rows)
    total = sum(int(t.n_bytes) for t in reader.tensors)
    tied = "output.weight" not in by_name  # the embedding table is the output layer too: a step reads it whole
    return {"file_bytes": Path(path).stat().st_size, "tensor_bytes": total, "embedding_bytes": int(emb.n_bytes), "tied_embeddings": tied,
            "step_weight_bytes": total if tied else total - int(emb.n_bytes) + int(emb.n_bytes) // rows,
            "param_count": sum(int(t.n_elements) for t in reader.tensors),
            "types": sorted({t.tensor_type.name for t in reader.tensors})}


def identity_problem(path, card, file_type: int, seed: int) -> str | None:
    """Why the GGUF file at `path` is not `card`'s file of llama.cpp file type `file_type` (llama.h's
    llama_ftype) with the random weights of `seed` as this writer makes it, or None when it is: it
    must read as GGUF, carry identity(card, seed), hold exactly the card's tensors in their shapes,
    and be as long as its tensors say (a copy cut short reads as GGUF up to its data)."""
    import gguf

    path = Path(path)
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - any way of not being GGUF is the answer
        return f"not a readable GGUF file ({type(exc).__name__}: {exc})"

    def value(key):
        field = reader.fields.get(key)
        return None if field is None else field.contents()

    for key, want in identity(card, seed).items():
        got = value(key)
        if got is None:
            return f"it has no {key} (not written by {WRITER})"
        if got != want:
            return f"its {key} is {got!r}, not {want!r}"
    if value("general.file_type") != file_type:
        return f"its general.file_type is {value('general.file_type')!r}, not {file_type}"
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml's ne: the numpy shape reversed
    want = {name: tuple(reversed(shape)) for name, shape, _ in tensor_specs(card)}
    if shapes != want:
        wrong = sorted(set(shapes) ^ set(want)) or sorted(n for n in want if shapes[n] != want[n])
        return f"its tensors are not the card's ({len(shapes)} against {len(want)}; first differing: {wrong[0]})"
    end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)  # gguf's reader refuses most such files itself
    if path.stat().st_size < end:
        return f"it is cut short: {path.stat().st_size} bytes, its tensors end at {end}"
    return None
