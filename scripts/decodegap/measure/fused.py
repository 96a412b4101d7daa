"""The fused mode's model: our own compact batch-1 decode step for the GQA cards (Llama, Mistral, Qwen2).

The transformers step launches about 1,500 kernels; most of its time, even graphed, is kernels too
small to stream memory well and the gaps between them. This step is written for one token:

- per layer, the q/k/v projections are one matrix and gate/up another (one GEMV each instead of
  three and two), stored by the session's weight path (bf16, or packed into a 4-bit format by the
  same `pack` the weight-path cells use, so W is unchanged);
- the KV cache is a K and a V tensor per layer, written in place at a position held on the device;
- on CUDA (backend "triton") a layer is six Triton launches (decodegap.measure.fused_kernels):
  the RMSNorms, RoPE, the KV append, SiLU x up and the residual adds ride inside the GEMVs, and
  attention is a split-over-positions decode kernel; a packed path's own GEMV replaces the bf16 one,
  with the same epilogues run on its output. The mode (decodegap.measure.modes.FusedDecoder)
  captures the step as one CUDA graph;
- backend "torch" is the same step in plain PyTorch ops (two small matmuls with a length mask for
  attention), which torch.compile fuses: the CPU's step. The kernels are tested under Triton's CPU
  interpreter against float64 references and the transformers model (tests/test_fused_kernels.py).

It loads the weights of the transformers model it is given (random or a real checkpoint), and gives
the same logits: `logit_check` compares them on the device, `tests/test_fused.py` at float32 on the
tiny cards. RMSNorm and RoPE follow transformers' arithmetic (float32 variance, cos/sin tables in
the activations' dtype), so that in bf16 the two differ only in summation order and rounding.
"""

from __future__ import annotations

from types import SimpleNamespace

from decodegap.core.config import SUPPORTED_MODEL_TYPES
from decodegap.core.errors import CellNotPossible

# The device check: relative L2 distance of the fused logits from the transformers model's, bf16
# (summation order alone moves bf16 logits by about 1e-2 of their norm; a wrong RoPE, mask or
# weight order moves them by their whole size).
LOGIT_CHECK_REL_TOL = 0.1


def composes(weights, model_type: str) -> str | None:
    """None when the fused step can run this card with this weight path (a unit of
    decodegap.measure.weights), else why not. Every supported card is a GQA decoder with RMSNorm,
    RoPE and a gated SiLU MLP; a weight path composes when its unit says so (its kernel is one op a
    compiled graph can hold, not an extension or an autotuner Dynamo cannot follow)."""
    from decodegap.measure.weights import PATHS

    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"the fused step covers model types {', '.join(SUPPORTED_MODEL_TYPES)}, not {model_type}"
    if not weights.composes_with_compile:
        takes = ", ".join(n for n, p in PATHS.items() if p.composes_with_compile)
        return (f"weight path {weights.name} does not compose with a compiled step (its kernel is not one graph for "
                f"torch.compile); the fused and compiled modes take {takes}")
    return None


class _Dense:
    """A bf16 linear layer as one matrix (and bias): F.linear, cuBLAS's GEMV at batch 1."""

    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias

    def __call__(self, x):
        import torch.nn.functional as F

        return F.linear(x, self.weight, self.bias)


class FusedModel:
    """A transformers GQA decoder's weights rearranged for batch-1 decode, and its static KV cache.

    Built from the dense (bf16) model, before the session's weight path packs it: the concatenated
    layers are packed here by the same path. `backend`: "triton" (CUDA's default: the fused kernels)
    or "torch" (the CPU's: plain ops, for torch.compile); `gemv_configs` overrides the kernels' launch
    shapes by role (decodegap.measure.fused_kernels.GEMV_CONFIGS)."""

    BACKENDS = ("triton", "torch")

    def __init__(self, model, weights, max_cache_len: int, backend: str | None = None, gemv_configs: dict | None = None):
        import torch

        cfg = model.config
        why = composes(weights, cfg.model_type)
        if why:
            raise CellNotPossible(why)
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.group = self.n_heads // self.n_kv
        self.eps = cfg.rms_norm_eps
        self.max_cache_len = max_cache_len
        self.scale = self.head_dim**-0.5
        inner = model.model
        self.embed = inner.embed_tokens.weight  # shared with the model: no copy
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.backend = backend or ("triton" if self.device.type == "cuda" else "torch")
        if self.backend not in self.BACKENDS:
            raise ValueError(f"fused backend {self.backend!r}: one of {', '.join(self.BACKENDS)}")
        rotary = inner.rotary_emb  # its inv_freq carries the card's RoPE scaling (Llama-3.1's llama3 type)
        inv_freq = rotary.inv_freq.detach().float()
        rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        # cos and sin of every cache position, as transformers computes them for a position (float32
        # angle, scaled, then rounded to the activations' dtype); half a head wide, since RoPE's two
        # halves share their angles
        angles = torch.arange(max_cache_len, device=self.device).float()[:, None] * inv_freq[None, :]
        self.cos = (angles.cos() * rope_scale).to(self.dtype).contiguous()
        self.sin = (angles.sin() * rope_scale).to(self.dtype).contiguous()
        self.final_norm = inner.norm.weight
        self.lm_head = model.lm_head.weight  # tied or not, the matrix the output projection reads
        pack = getattr(weights, "pack", None)
        self.packed = pack is not None

        def joined(linears):
            w = torch.cat([m.weight.detach() for m in linears])
            has_bias = [m.bias is not None for m in linears]
            b = torch.cat([m.bias.detach() for m in linears]) if all(has_bias) else None
            if any(has_bias) and b is None:
                raise CellNotPossible("the fused step joins q/k/v only when all or none of them have a bias")
            if pack is None:
                return _Dense(w, b)
            lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=b is not None, device=w.device, dtype=w.dtype)
            with torch.no_grad():
                lin.weight.copy_(w)
                if b is not None:
                    lin.bias.copy_(b)
            return pack(lin)

        self.layers = []
        for block in inner.layers:
            a, m = block.self_attn, block.mlp
            layer = SimpleNamespace()
            layer.in_norm, layer.post_norm = block.input_layernorm.weight, block.post_attention_layernorm.weight
            layer.qkv = joined([a.q_proj, a.k_proj, a.v_proj])
            layer.o = joined([a.o_proj])
            layer.gate_up = joined([m.gate_proj, m.up_proj])
            layer.down = joined([m.down_proj])
            self.layers.append(layer)
        self.intermediate = block.mlp.gate_proj.out_features
        # a K and a V tensor per layer, (kv heads, positions, head_dim). Not views of one tensor: Inductor
        # turns an in-place write into a view into a copy of the whole base tensor (measured on the H200
        # at commit 96ac358: the fused step's GPU time 1.5 ms over the compiled transformers step's),
        # and writes a whole tensor in place.
        shape = (self.n_kv, max_cache_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.slots = torch.arange(max_cache_len, device=self.device)
        if self.backend == "triton":
            self._triton_buffers(gemv_configs or {})

    def _triton_buffers(self, overrides: dict) -> None:
        """The step's fixed buffers (a captured graph replays into them) and the kernels' launch plan."""
        import torch

        from decodegap.measure import fused_kernels as fk

        why = fk.usable_here(self.device)
        if why:
            raise ValueError(f"fused backend triton: {why}")
        unknown = sorted(set(overrides) - set(fk.GEMV_CONFIGS))
        if unknown:
            raise ValueError(f"gemv_configs: unknown role(s) {', '.join(unknown)}; roles are {', '.join(fk.GEMV_CONFIGS)}")
        self.gemv = {**fk.GEMV_CONFIGS, **overrides}
        self.attention_plan = fk.AttentionPlan.for_cache(self.max_cache_len, self.n_kv)
        hidden, qd = self.embed.shape[1], self.n_heads * self.head_dim

        def buf(n):
            return torch.empty(n, dtype=self.dtype, device=self.device)

        self._x, self._xn, self._q, self._attn = buf(hidden), buf(hidden), buf(qd), buf(qd)
        self._h, self._logits = buf(self.intermediate), buf(self.lm_head.shape[0])
        self._scratch = fk.attention_scratch(self.attention_plan, self.n_heads, self.n_kv, self.head_dim, self.device)

    def describe(self) -> dict:
        """What a session records of the step: its backend and, for the kernels, their launch shapes."""
        out = {"backend": self.backend, "weights": "packed by the path" if self.packed else "bf16 joined"}
        if self.backend == "triton":
            out["gemv"] = {role: c.as_dict() for role, c in self.gemv.items()}
            p = self.attention_plan
            out["attention"] = {"split_positions": p.split, "splits": p.n_splits, "block_positions": p.block_t}
        return out

    def _rms(self, x, w):
        import torch

        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def _rope(self, positions):
        import torch

        cos, sin = self.cos[positions], self.sin[positions]
        return torch.cat((cos, cos), dim=-1)[:, None, :], torch.cat((sin, sin), dim=-1)[:, None, :]

    @staticmethod
    def _rotate(x, cos, sin):
        import torch

        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, tokens, positions):
        """Logits (1, vocab) of the last of `tokens` (T,), at `positions` (T,) on the device.

        T == 1 is the decode step (attention over the cache up to its position); T > 1 is a prefill
        from position 0 (causal attention over the T tokens), which fills the cache. Plain ops for
        every prefill and for backend torch's decode."""
        import torch
        import torch.nn.functional as F

        n = tokens.shape[0]
        hq, hkv, d = self.n_heads, self.n_kv, self.head_dim
        x = F.embedding(tokens, self.embed)
        cos, sin = self._rope(positions)
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.in_norm)
            q, k, v = layer.qkv(h).split([hq * d, hkv * d, hkv * d], dim=-1)
            q = self._rotate(q.view(n, hq, d), cos, sin)
            k = self._rotate(k.view(n, hkv, d), cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc.index_copy_(1, positions, k.transpose(0, 1))
            vc.index_copy_(1, positions, v.view(n, hkv, d).transpose(0, 1))
            if n == 1:  # one query per head against the cache, the group's heads sharing one K/V
                s = torch.matmul(q.view(hkv, self.group, d), kc.transpose(1, 2)).float() * self.scale
                s = s.masked_fill(self.slots > positions, float("-inf"))
                o = torch.matmul(torch.softmax(s, dim=-1).to(self.dtype), vc).reshape(1, hq * d)
            else:
                kk = kc[:, :n].repeat_interleave(self.group, dim=0)
                vv = vc[:, :n].repeat_interleave(self.group, dim=0)
                o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk[None], vv[None], is_causal=True, scale=self.scale)
                o = o[0].transpose(0, 1).reshape(n, hq * d)
            x = x + layer.o(o)
            h = self._rms(x, layer.post_norm)
            gate, up = layer.gate_up(h).split([self.intermediate, self.intermediate], dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        return F.linear(self._rms(x[-1:], self.final_norm), self.lm_head)

    def decode(self, token, position):
        """One decode step: token (1,) and position (1,) on the device -> logits (1, vocab). Backend
        triton returns its logits buffer, which the next step overwrites."""
        if self.backend == "torch":
            return self.forward(token, position)
        return self._decode_packed(token, position) if self.packed else self._decode_kernels(token, position)

    def _embed(self, token):
        import torch

        torch.index_select(self.embed, 0, token, out=self._x.view(1, -1))

    def _attend(self, i, position):
        from decodegap.measure import fused_kernels as fk

        fk.attention(self._q, self.k_cache[i], self.v_cache[i], position, self.attention_plan, self._scratch, self._attn,
                     self.n_heads, self.n_kv, self.head_dim, self.scale)

    def _decode_kernels(self, token, position):
        """bf16: six launches a layer, every small op inside a GEMV."""
        from decodegap.measure import fused_kernels as fk

        x, g = self._x, self.gemv
        self._embed(token)
        for i, layer in enumerate(self.layers):
            fk.qkv_rope(x, layer.qkv.weight, layer.qkv.bias, layer.in_norm, self.eps, self.cos, self.sin, position, self._q,
                        self.k_cache[i], self.v_cache[i], self.n_heads, self.n_kv, self.head_dim, g["qkv"])
            self._attend(i, position)
            fk.linear(self._attn, layer.o.weight, x, g["o"], b=layer.o.bias, residual=x)
            fk.gate_up(x, layer.gate_up.weight, layer.post_norm, self.eps, self._h, self.intermediate, g["gate_up"])
            fk.linear(self._h, layer.down.weight, x, g["down"], b=layer.down.bias, residual=x)
        fk.linear(x, self.lm_head, self._logits, g["lm_head"], g=self.final_norm, eps=self.eps)
        return self._logits.view(1, -1)

    def _decode_packed(self, token, position):
        """A packed path: its GEMVs on the normalised input, the same epilogues on their outputs, and
        the residual add with the next norm in one launch."""
        from decodegap.measure import fused_kernels as fk

        x, xn, g = self._x, self._xn, self.gemv
        self._embed(token)
        fk.add_norm(x, None, self.layers[0].in_norm, self.eps, xn)
        for i, layer in enumerate(self.layers):
            y = layer.qkv(xn.view(1, -1)).view(-1)
            fk.qkv_rope(xn, None, None, layer.in_norm, self.eps, self.cos, self.sin, position, self._q, self.k_cache[i],
                        self.v_cache[i], self.n_heads, self.n_kv, self.head_dim, g["qkv"], y=y)
            self._attend(i, position)
            fk.add_norm(x, layer.o(self._attn.view(1, -1)).view(-1), layer.post_norm, self.eps, xn)
            y = layer.gate_up(xn.view(1, -1)).view(-1)
            fk.gate_up(xn, None, layer.post_norm, self.eps, self._h, self.intermediate, g["gate_up"], y=y)
            following = self.layers[i + 1].in_norm if i + 1 < len(self.layers) else self.final_norm
            fk.add_norm(x, layer.down(self._h.view(1, -1)).view(-1), following, self.eps, xn)
        fk.linear(xn, self.lm_head, self._logits, g["lm_head"])
        return self._logits.view(1, -1)


def logit_check(model, net: FusedModel, prompt_tokens: int = 32, steps: int = 3, seed: int = 0) -> dict:
    """The fused step's logits against the transformers model's on the same weights: a short prompt,
    then `steps` decode steps fed the transformers model's own argmax. Relative L2 distance and the
    largest absolute difference over all steps; `agrees` judges it against LOGIT_CHECK_REL_TOL.

    Uses (and overwrites) the first prompt_tokens + steps slots of the net's cache: a session's
    prefill rewrites them."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    vocab = net.embed.shape[0]
    seq = torch.randint(0, vocab, (1, prompt_tokens), generator=g).to(net.device)
    rel, worst, top1 = [], 0.0, 0
    with torch.inference_mode():
        for step in range(steps + 1):
            ref = model(input_ids=seq, use_cache=False).logits[0, -1].float()
            n = seq.shape[1]
            if step == 0:
                got = net.forward(seq[0], torch.arange(n, device=net.device))[0].float()
            else:
                got = net.decode(seq[0, -1:], torch.tensor([n - 1], device=net.device))[0].float()
            rel.append(float((got - ref).norm() / ref.norm()))
            worst = max(worst, float((got - ref).abs().max()))
            top1 += int(got.argmax() == ref.argmax())
            seq = torch.cat([seq, ref.argmax().view(1, 1)], dim=1)
    out = {"reference": "the transformers model, whole sequence without a cache", "dtype": str(net.dtype).removeprefix("torch."),
           "prompt_tokens": prompt_tokens, "decode_steps": steps, "rel_l2_max": max(rel), "max_abs_diff": worst,
           "top1_agree": top1, "compared": steps + 1, "rel_tolerance": LOGIT_CHECK_REL_TOL}
    out["agrees"] = bool(max(rel) <= LOGIT_CHECK_REL_TOL)
    return out
