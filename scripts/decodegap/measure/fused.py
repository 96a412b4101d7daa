"""The fused mode's model: our own compact batch-1 decode step for the GQA cards (Llama, Mistral, Qwen2).

The transformers step launches about 1,500 kernels; most of its time, even graphed, is kernels too
small to stream memory well and the gaps between them. This step is written for one token:

- per layer, the q/k/v projections are one matrix and gate/up another (one GEMV each instead of
  three and two), stored by the session's weight path (bf16, or packed into the path's format by
  the same `pack` the weight-path cells use, so W is unchanged);
- the KV cache is a K and a V tensor per layer, written in place at a position held on the device;
- on CUDA (backend "triton") a layer is six Triton launches (decodegap.measure.fused_kernels):
  the RMSNorms, RoPE, the KV append, SiLU x up and the residual adds ride inside the GEMVs, and
  attention is a split-over-positions decode kernel (eight launches where the norm lever
  normalises x in launches of its own: the H200 table's choice for fp8 and int4). The GEMV kernels read bf16, and the fp8 and
  int4-triton paths' stored tensors, themselves (the same prologues and epilogues); another packed
  path's own GEMV (int4-tinygemm) replaces the bf16 one, with the same epilogues run on its
  output. Launch shapes and levers come per GPU type (fused_kernels.launch, or what
  tune_launch_shapes chose). The mode (decodegap.measure.modes.FusedDecoder) captures the step as
  one CUDA graph;
- backend "torch" is the same step in plain PyTorch ops (two small matmuls with a length mask for
  attention), which torch.compile fuses: the CPU's step. The kernels are tested under Triton's CPU
  interpreter against float64 references and the transformers model (tests/test_fused_kernels.py).

It loads the weights of the transformers model it is given (random or a real checkpoint), and gives
the same logits: `logit_check` holds its error against a float32 reference to the transformers
model's own on the session's prompt, `tests/test_fused.py` at float32 on the tiny cards. RMSNorm and
RoPE follow transformers' arithmetic (float32 variance, cos/sin tables in the activations' dtype),
so that in bf16 the two differ only in summation order and rounding.
"""

from __future__ import annotations

from types import SimpleNamespace

from decodegap.core.config import SUPPORTED_MODEL_TYPES
from decodegap.core.errors import CellNotPossible

# The logit check (logit_check): the fused step's error against a float32 reference may be at most
# LOGIT_CHECK_RATIO times the transformers model's own error in the same dtype (bf16 on the GPU:
# summation order and rounding move logits by about 5e-2 of their norm at 28 layers; swapped k and v
# move them by their whole size, and even a RoPE turning the wrong way, which random weights' nearly
# uniform attention hides well, by nearly twice the bf16 error: tests/test_fused.py), plus
# LOGIT_CHECK_FLOOR (relative L2), which lets a float32 step agree with a float32 reference (the
# tests'; both errors near 1e-7).
LOGIT_CHECK_RATIO = 1.2
LOGIT_CHECK_FLOOR = 1e-4
LOGIT_CHECK_STEPS = 4  # decode steps compared after the prefill
LOGIT_CHECK_PREFILL_CHUNK = 2048  # the references' prefill in chunks: an 8B model's float32 activations stay small


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
    or "torch" (the CPU's: plain ops, for torch.compile). `gemv_configs`: the kernels' launch shapes
    and levers, in any form decodegap.measure.fused_kernels.resolve takes (None: the table's entry
    for the device's GPU type, or for `gpu`, a config/gpus.yaml key; {role: shape}: the bf16 roles
    changed; tune_launch_shapes' dict: everything it chose)."""

    BACKENDS = ("triton", "torch")

    def __init__(self, model, weights, max_cache_len: int, backend: str | None = None, gemv_configs=None,
                 gpu: str | None = None):
        import torch

        cfg = model.config
        why = composes(weights, cfg.model_type)
        if why:
            raise CellNotPossible(why)
        self.weights = weights
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
        # the weights the fused kernels read themselves: bf16 as joined, or a path's packed tensors in a
        # format they read (fp8, int4-triton: the module's `operand`); any other path runs its own GEMV
        operand = getattr(layer.qkv, "operand", None)
        self.kernel_format = "dense" if not self.packed else operand.format if operand is not None else None
        # a K and a V tensor per layer, (kv heads, positions, head_dim). Not views of one tensor: Inductor
        # turns an in-place write into a view into a copy of the whole base tensor (measured on the H200
        # at commit 96ac358: the fused step's GPU time 1.5 ms over the compiled transformers step's),
        # and writes a whole tensor in place.
        shape = (self.n_kv, max_cache_len, self.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.slots = torch.arange(max_cache_len, device=self.device)
        if self.backend == "triton":
            self.set_launch_shapes(gemv_configs, gpu)

    def set_launch_shapes(self, spec, gpu: str | None = None) -> None:
        """The kernels' launch shapes and levers (`spec`: any form fused_kernels.resolve takes), the
        attention's plan, and the step's fixed buffers (a captured graph replays into them: capture
        again after this). Benchmarks switch levers on one model with it."""
        import torch

        from decodegap.measure import fused_kernels as fk

        why = fk.usable_here(self.device)
        if why:
            raise ValueError(f"fused backend triton: {why}")
        self.shapes = fk.resolve(spec, self.device, gpu)
        fmt, hidden = self.kernel_format or "dense", self.embed.shape[1]
        # the lever pdl: one setting for the step, its format's at its card width
        self._pdl = self.shapes.pdl_for(fmt, hidden)
        if self._pdl:
            why = fk.pdl_available(self.device)
            if why:
                raise ValueError(f"launch shapes ask for programmatic dependent launch: {why}")
        # the lever x_pairs: the int4 GEMVs after a norm and down read their inputs as f16 pairs, with shapes of their own
        self._x_pairs = bool(self.kernel_format) and self.shapes.x_pairs_for(fmt, hidden)
        # the lever o_pairs (fp8): o too, the attention's combine writing its output as the halves
        self._o_pairs = bool(self.kernel_format) and self.shapes.o_pairs_for(fmt, hidden)
        read = {role: "dense" if role == "lm_head" else f"{fmt}_pairs" if self.shapes.reads_pairs(fmt, role, hidden) else fmt
                for role in fk.ROLES}
        self.gemv = {role: self.shapes.gemv_for(read[role], role, hidden) for role in fk.ROLES}
        self.gemv_read = read  # each role's read (its table key): what a tuner in the step changes
        self.heads = fk.HeadLayout(self.n_heads, self.n_kv, self.head_dim)
        self.attention_plan = fk.AttentionPlan.for_cache(self.max_cache_len, self.n_kv, self.shapes.attention,
                                                         fk.sm_count_of(self.device))
        qd = self.n_heads * self.head_dim

        def buf(n):
            return torch.empty(n, dtype=self.dtype, device=self.device)

        self._x, self._xn, self._q, self._attn = buf(hidden), buf(hidden), buf(qd), buf(qd)
        self._h, self._logits = buf(self.intermediate), buf(self.lm_head.shape[0])
        # the lever x_fp32: the GEMVs' inputs the step writes (x normalised apart, the MLP's SiLU(gate) * up) as
        # float32 holding their bf16 values, so no GEMV loop converts its input
        self._x_fp32 = bool(self.kernel_format) and self.shapes.x_fp32_for(fmt, hidden) and not self._x_pairs
        if self._x_pairs:  # int32 words of two f16 values: half as many as the vector's
            self._xn_in = torch.empty(hidden // 2, dtype=torch.int32, device=self.device)
            self._h_in = torch.empty(self.intermediate // 2, dtype=torch.int32, device=self.device)
        elif self._x_fp32:
            self._xn_in = torch.empty(hidden, dtype=torch.float32, device=self.device)
            self._h_in = torch.empty(self.intermediate, dtype=torch.float32, device=self.device)
        else:
            self._xn_in, self._h_in = self._xn, self._h
        # what attention writes and o reads: the output, or (o_pairs) its f16 halves, two columns a word
        self._attn_in = torch.empty(qd // 2, dtype=torch.int32, device=self.device) if self._o_pairs else self._attn
        # the norm lever "sum": x's sum of squares before each norm (2 a layer and the final one),
        # added up by the o and down GEMVs that write x, zeroed at the start of every step
        self._sums = torch.zeros(2 * len(self.layers) + 1, dtype=torch.float32, device=self.device)
        self._scratch = fk.attention_scratch(self.attention_plan, self.heads, self.device)
        # pdl_prefetch: the loop steps each of the first pdl_prefetch_per_sm x SMs programs of a kernel prefetches
        self._prefetch_steps = self.shapes.prefetch_for(fmt)
        self._prefetching = self.shapes.pdl_prefetch_per_sm * fk.sm_count_of(self.device)
        # l2_ahead: the attention's split programs prefetch the o weight into L2 while it waits on latencies
        self._l2_ahead = self.shapes.l2_ahead_for(fmt, hidden) if self.kernel_format else None  # a packed path's o is its own
        self._l2_ahead_bytes = self.shapes.l2_ahead_bytes_for(fmt, hidden) if self._l2_ahead else 0

    def describe(self) -> dict:
        """What a session records of the step: its backend and, for the kernels, their launch shapes,
        the attention's split of the cache and the levers."""
        if not self.packed:
            weights = "bf16 joined"
        elif self.kernel_format:
            weights = f"packed by the path, read by the fused kernels ({self.kernel_format})"
        else:
            weights = "packed by the path"
        out = {"backend": self.backend, "weights": weights}
        if self.backend == "triton":
            out["gemv"] = {role: c.as_dict() for role, c in self.gemv.items()}
            out["attention"] = self.attention_plan.as_dict()
            out["pdl"] = self._pdl
            if self._x_fp32:
                out["x_fp32"] = True
            if self._x_pairs:
                out["x_pairs"] = True
            if self._o_pairs:
                out["o_pairs"] = True
            if self._l2_ahead:
                out["l2_ahead"] = self._l2_ahead
                if self._l2_ahead_bytes:
                    out["l2_ahead_mib"] = self._l2_ahead_bytes / 2**20
                out["l2_ahead_at"] = self.shapes.l2_ahead_at
            if self._pdl and self._prefetch_steps:
                out["pdl_prefetch"] = self._prefetch_steps
                out["pdl_prefetch_programs"] = self._prefetching
            if self.kernel_format:  # a packed path's own GEMVs take x normalised by add_norm, whatever the lever
                out["norm"] = self.shapes.norm_for(self.kernel_format)
            out["launch_shapes"] = self.shapes.source
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
        for _, launch in self.launches(token, position):
            launch()
        return self._logits.view(1, -1)

    def launches(self, token, position) -> list:
        """Backend triton's step as its launches in order, each (kind, call): "gemv" (a weight read
        with its prologue and epilogue), "attention" (the split kernel and its combine) or "other"
        (the embedding row; a packed path's epilogues and add_norm). A benchmark captures the kinds
        apart to take a step's time apart."""
        return self._kernel_launches(token, position) if self.kernel_format else self._packed_launches(token, position)

    def _embed(self, token):
        import torch

        torch.index_select(self.embed, 0, token, out=self._x.view(1, -1))

    def _attend(self, i, position):
        from decodegap.measure import fused_kernels as fk

        ahead = {}
        if self._l2_ahead:  # o's weight as stored, then gate_up's first rows
            ahead = {"l2_ahead": self._l2_spans(i), "l2_priority": self._l2_ahead, "l2_at": self.shapes.l2_ahead_at}
        fk.attention(self._q, self.k_cache[i], self.v_cache[i], position, self._attn_in, plan=self.attention_plan,
                     scratch=self._scratch, heads=self.heads, scale=self.scale, pdl=self._pdl,
                     prefetch_steps=self._prefetch_steps, prefetching=self._prefetching, **ahead)

    def _l2_spans(self, i: int) -> list:
        """What layer i's attention prefetches into L2 under l2_ahead: the o weight as stored, then
        (l2_ahead_mib) gate_up's first rows of its gate half and of its up half, as many of each as
        fill half the bytes: the rows its first programs read."""
        spans = [self._operand(self.layers[i].o).weight]
        if self._l2_ahead_bytes:
            w = self._operand(self.layers[i].gate_up).weight  # gate rows, then up rows
            inter = w.shape[0] // 2
            rows = min(inter, max(1, self._l2_ahead_bytes // 2 // (w.shape[1] * w.element_size())))
            spans += [w[:rows], w[inter:inter + rows]]
        return spans

    @staticmethod
    def _operand(linear):
        """What the kernels read of a joined layer: its packed tensors, or the bf16 matrix."""
        from decodegap.measure import fused_kernels as fk

        return linear.operand if hasattr(linear, "operand") else fk.WeightOperand("dense", linear.weight)

    def _kernel_launches(self, token, position) -> list:
        """Six launches a layer (five with the in-split combine), every small op inside a GEMV: bf16, or a
        path whose storage the kernels read (fp8, int4-triton). The norm lever (launch.py) decides how
        the GEMVs after a norm get x's statistics: each program sums them ("program"), the GEMV that
        wrote x adds them up for it ("sum": plus one zeroing of the sums a step), or a launch of its
        own normalises x before each ("apart": two launches more a layer, and one before lm_head)."""
        from functools import partial as call

        from decodegap.measure import fused_kernels as fk

        x, g, op, eps, mode = self._x, self.gemv, self._operand, self.eps, self.shapes.norm_for(self.kernel_format)
        pdl = self._pdl
        # the GEMVs': their weights' first loop steps, in the programs that start while the kernel before runs
        pf = {"pdl": pdl, "prefetch_steps": self._prefetch_steps, "prefetching": self._prefetching}
        sums = self._sums
        pairs_for = "fp8" if self.kernel_format == "fp8" else "int4"  # the order the lever x_pairs writes the inputs in
        out = [("other", call(self._embed, token))]
        if mode == "sum":
            out.append(("other", sums.zero_))

        def normed(slot, weight, final=False):
            """What a GEMV after a norm takes: its input, and the norm's keyword arguments. Slot 0 (layer
            0's input norm) has no GEMV before it to sum x: its programs sum it themselves. The final
            norm's GEMV (lm_head, dense) never reads f16 pairs."""
            if mode == "apart":
                xn = self._xn if final and self._x_pairs else self._xn_in
                out.append(("other", call(fk.add_norm, x, None, weight, xn, eps=eps, pdl=pdl, pairs_for=pairs_for)))
                return xn, {"norm_weight": None}
            if mode == "sum" and slot > 0:
                return x, {"norm_weight": weight, "norm_sum": sums[slot:slot + 1]}
            return x, {"norm_weight": weight}

        def summed(slot):
            return {"sum_out": sums[slot:slot + 1]} if mode == "sum" else {}

        for i, layer in enumerate(self.layers):
            src, norm = normed(2 * i, layer.in_norm)
            out.append(("gemv", call(fk.qkv_rope, src, op(layer.qkv), heads=self.heads, position=position, cos=self.cos,
                                     sin=self.sin, q_out=self._q, k_cache=self.k_cache[i], v_cache=self.v_cache[i], eps=eps,
                                     shape=g["qkv"], bias=layer.qkv.bias, **pf, **norm)))
            out.append(("attention", call(self._attend, i, position)))
            out.append(("gemv", call(fk.linear, self._attn_in, op(layer.o), x, shape=g["o"], bias=layer.o.bias, residual=x,
                                     **pf, **summed(2 * i + 1))))
            src, norm = normed(2 * i + 1, layer.post_norm)
            out.append(("gemv", call(fk.gate_up, src, op(layer.gate_up), self._h_in, eps=eps, shape=g["gate_up"],
                                     act_dtype=self.dtype, pairs_for=pairs_for, **pf, **norm)))
            out.append(("gemv", call(fk.linear, self._h_in, op(layer.down), x, shape=g["down"], bias=layer.down.bias, residual=x,
                                     **pf, **summed(2 * i + 2))))
        src, norm = normed(2 * len(self.layers), self.final_norm, final=True)
        out.append(("gemv", call(fk.linear, src, self.lm_head, self._logits, shape=g["lm_head"], eps=eps, **pf, **norm)))
        return out

    def _packed_launches(self, token, position) -> list:
        """A packed path with its own GEMV (int4-tinygemm): its GEMVs on the normalised input, the same
        epilogues on their outputs, and the residual add with the next norm in one launch."""
        from functools import partial as call

        from decodegap.measure import fused_kernels as fk

        x, xn, g, pdl, eps = self._x, self._xn, self.gemv, self._pdl, self.eps
        y = {}  # each GEMV's output, for the epilogue after it

        def gemv(name, module, source):
            y[name] = module(source.view(1, -1)).view(-1)

        out = [("other", call(self._embed, token)), ("other", call(fk.add_norm, x, None, self.layers[0].in_norm, xn, eps=eps, pdl=pdl))]
        for i, layer in enumerate(self.layers):
            following = self.layers[i + 1].in_norm if i + 1 < len(self.layers) else self.final_norm
            out += [
                ("gemv", call(gemv, "qkv", layer.qkv, xn)),
                ("other", lambda i=i, layer=layer: fk.qkv_rope(
                    xn, None, heads=self.heads, position=position, cos=self.cos, sin=self.sin, q_out=self._q,
                    k_cache=self.k_cache[i], v_cache=self.v_cache[i], norm_weight=layer.in_norm, eps=eps, shape=g["qkv"],
                    y=y["qkv"], pdl=pdl)),
                ("attention", call(self._attend, i, position)),
                ("gemv", call(gemv, "o", layer.o, self._attn)),
                ("other", lambda layer=layer: fk.add_norm(x, y["o"], layer.post_norm, xn, eps=eps, pdl=pdl)),
                ("gemv", call(gemv, "gate_up", layer.gate_up, xn)),
                ("other", lambda layer=layer: fk.gate_up(xn, None, self._h, norm_weight=layer.post_norm, eps=eps,
                                                         shape=g["gate_up"], y=y["gate_up"], pdl=pdl)),
                ("gemv", call(gemv, "down", layer.down, self._h)),
                ("other", lambda following=following: fk.add_norm(x, y["down"], following, xn, eps=eps, pdl=pdl))]
        out.append(("gemv", call(fk.linear, xn, self.lm_head, self._logits, shape=g["lm_head"], pdl=pdl)))
        return out


def reference_model(model, weights, dtype):
    """The transformers model `model` stands for, at `dtype`: its parameters, with every layer a weight
    path packed replaced by the weight it stands for (the path's `dense(packed)`). Built on the
    model's device; the caller frees it."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device(model.device):  # SDPA: the one attention every dtype has (a cell's flash-attn has no float32)
        ref = AutoModelForCausalLM.from_config(model.config, dtype=dtype, attn_implementation="sdpa")
    ref.eval()
    ref.requires_grad_(False)
    with torch.no_grad():
        for name, param in ref.named_parameters():  # a tied table once
            path, leaf = name.rsplit(".", 1)
            source = model.get_submodule(path)
            packed = leaf == "weight" and hasattr(source, "weight_buffers") and not isinstance(source, torch.nn.Linear)
            param.copy_(weights.dense(source, None) if packed else getattr(source, leaf))
    return ref


def _relative(got, ref) -> float:
    return float((got - ref).norm() / ref.norm())


def _transformers_run(model, prompt, steps: int, tokens=None, chunk: int = LOGIT_CHECK_PREFILL_CHUNK):
    """Logits (float32) after each of `steps` decode steps of a transformers model on a dynamic cache,
    after a prefill of `prompt` (1, ctx) in chunks; each step feeds the next of `tokens`, or (None)
    the argmax of the logits before it. Returns (logits per step, the tokens fed, the prefill's logits)."""
    import torch
    from transformers import DynamicCache

    from decodegap.measure.modes import cache_kwarg

    cache, kw = DynamicCache(config=model.config), cache_kwarg(model)
    for start in range(0, prompt.shape[1], chunk):
        logits = model(input_ids=prompt[:, start:start + chunk], use_cache=True, logits_to_keep=1, **{kw: cache}).logits
    prefill = logits[0, -1].float()
    fed, out, last = [], [], prefill
    for step in range(steps):
        token = last.argmax().view(1, 1) if tokens is None else tokens[step].view(1, 1)
        fed.append(token.view(1))
        last = model(input_ids=token, use_cache=True, logits_to_keep=1, **{kw: cache}).logits[0, -1].float()
        out.append(last)
    return out, torch.cat(fed), prefill


def logit_check(model, net: FusedModel, prompt=None, *, steps: int = LOGIT_CHECK_STEPS, prompt_tokens: int = 32,
                seed: int = 0) -> dict:
    """The fused step against the transformers model, each against a float32 reference on the same tokens.

    `prompt` (1, ctx) is the session's own context (None: `prompt_tokens` random tokens), so the
    split attention runs over as many positions as the timed steps. The reference is the transformers
    model upcast to float32 holding the weights the step multiplies by (a packed path's `dense()`,
    reference_model); it prefills the prompt and decodes `steps` tokens greedily. The transformers
    model in the step's dtype (the same weights: for a packed path its dequantized weights, rounded)
    and the fused step (net.forward's prefill, then net.decode) are fed the same tokens. Each step's
    logits are compared with the reference's (relative L2): the check agrees when the fused step's
    worst error is at most LOGIT_CHECK_RATIO times the transformers model's, plus LOGIT_CHECK_FLOOR.

    Overwrites the net's cache from position 0 to ctx + steps: the caller prefills again after it."""
    import torch

    vocab = net.embed.shape[0]
    if prompt is None:
        g = torch.Generator(device="cpu").manual_seed(seed)
        prompt = torch.randint(0, vocab, (1, prompt_tokens), generator=g).to(net.device)
    ctx = prompt.shape[1]
    if ctx + steps > net.max_cache_len:
        raise ValueError(f"the logit check's {ctx} + {steps} positions do not fit the fused cache of {net.max_cache_len}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    every_backend = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # the reference in true float32, not TF32
    try:
        # SDPA picks its kernel per call (a cell's attention path may have narrowed the choice to one
        # that has no float32 kernel); the fused prefill and steps are the session's own either way
        with torch.inference_mode(), sdpa_kernel(every_backend):
            ref_model = reference_model(model, net.weights, torch.float32)
            ref, tokens, ref_prefill = _transformers_run(ref_model, prompt, steps)
            if net.dtype == torch.float32:  # the model is the reference: its own error is zero
                theirs = ref
            else:
                for param in ref_model.parameters():  # parameters only: RoPE's inv_freq stays float32, as the model keeps it
                    param.data = param.data.to(net.dtype)
                theirs, _, _ = _transformers_run(ref_model, prompt, steps, tokens)
            del ref_model
            if net.device.type == "cuda":
                torch.cuda.empty_cache()
            prefill = net.forward(prompt[0], torch.arange(ctx, device=net.device))[0].float()
            ours = []
            for step in range(steps):
                position = torch.tensor([ctx + step], device=net.device)
                ours.append(net.decode(tokens[step:step + 1], position)[0].to(torch.float32, copy=True))  # the next step overwrites the buffer
    finally:
        torch.set_float32_matmul_precision(before)
    fused_err = max(_relative(o, r) for o, r in zip(ours, ref))
    their_err = max(_relative(t, r) for t, r in zip(theirs, ref))
    out = {"reference": "transformers in float32 on the weights the step multiplies by (a packed path's dense())",
           "dtype": str(net.dtype).removeprefix("torch."), "context": ctx, "decode_steps": steps, "compared": steps,
           "tokens": [int(t) for t in tokens], "rel_l2_max": fused_err, "transformers_rel_l2_max": their_err,
           "ratio": fused_err / their_err if their_err > 0 else None, "ratio_tolerance": LOGIT_CHECK_RATIO,
           "abs_floor": LOGIT_CHECK_FLOOR, "max_abs_diff": max(float((o - r).abs().max()) for o, r in zip(ours, ref)),
           "top1_agree": sum(int(o.argmax() == r.argmax()) for o, r in zip(ours, ref)),
           "transformers_top1_agree": sum(int(t.argmax() == r.argmax()) for t, r in zip(theirs, ref)),
           "prefill_rel_l2": _relative(prefill, ref_prefill)}
    out["agrees"] = bool(fused_err <= LOGIT_CHECK_RATIO * their_err + LOGIT_CHECK_FLOOR)
    return out


def weight_path_errors(build, paths, prompt, *, steps: int = LOGIT_CHECK_STEPS, gemv_configs=None, log=print) -> list[dict]:
    """What each weight path does to the logits, against the bf16 weights it was made from.

    `build()` returns the card's dense model (bf16 on the device; the same weights on every call, a
    seeded build). The reference is that model upcast to float32 (reference_model with the bf16 path):
    it prefills `prompt` (1, ctx) and decodes `steps` tokens greedily. For each path (WeightPath), on
    the same tokens: the fused step built from the dense weights (`fused`: the error a session of that
    path carries against bf16 weights), and the transformers model holding the path's dequantized
    weights in float32 (`format`: the format's own share of that error, no kernel involved). A row per
    path: the worst relative L2 over the steps and how many steps agree on the top-1 token, or the
    reason the path cannot pack this card."""
    import time

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from decodegap.measure.weights import get_weight_path

    every_backend = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    ctx = prompt.shape[1]

    def compare(got, ref) -> dict:
        return {"rel_l2_max": max(_relative(g, r) for g, r in zip(got, ref)),
                "top1_agree": sum(int(g.argmax() == r.argmax()) for g, r in zip(got, ref))}

    def free(device):
        if device.type == "cuda":
            torch.cuda.empty_cache()

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # the references in true float32, not TF32
    rows = []
    try:
        with torch.inference_mode(), sdpa_kernel(every_backend):
            model = build()
            ref_model = reference_model(model, get_weight_path("bf16"), torch.float32)
            ref, tokens, _ = _transformers_run(ref_model, prompt, steps)
            del ref_model, model
            free(prompt.device)
            for path in paths:
                t = time.perf_counter()
                model = build()
                try:
                    net = FusedModel(model, path, ctx + steps, gemv_configs=gemv_configs)
                except (CellNotPossible, ValueError) as exc:  # this card's shapes or type: a row that says why
                    rows.append({"path": path.name, "context": ctx, "decode_steps": steps, "reason": str(exc)})
                    log(f"  {path.name:<12} cannot run: {exc}")
                    continue
                net.forward(prompt[0], torch.arange(ctx, device=net.device))
                ours = [net.decode(tokens[s:s + 1], torch.tensor([ctx + s], device=net.device))[0].to(torch.float32, copy=True)
                        for s in range(steps)]
                del net
                free(prompt.device)
                model = path.prepare(model) if path.name != "bf16" else model
                own = reference_model(model, path, torch.float32)
                del model
                theirs, _, _ = _transformers_run(own, prompt, steps, tokens)
                del own
                free(prompt.device)
                row = {"path": path.name, "context": ctx, "decode_steps": steps, "fused": compare(ours, ref),
                       "format": compare(theirs, ref), "fused_vs_format": compare(ours, theirs)}
                rows.append(row)
                log(f"  {path.name:<12} fused {row['fused']['rel_l2_max']:.3e} (top-1 {row['fused']['top1_agree']}/{steps}), "
                    f"format alone {row['format']['rel_l2_max']:.3e} ({row['format']['top1_agree']}/{steps}), "
                    f"fused against the format {row['fused_vs_format']['rel_l2_max']:.3e}  [{time.perf_counter() - t:.0f} s]")
    finally:
        torch.set_float32_matmul_precision(before)
    return rows
