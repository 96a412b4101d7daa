"""The attention microbenchmark: the paper's unit, microseconds per layer for one decode-shaped
attention call, with a card's real head layout.

One "step" of a layer session is what one decode step asks of attention: one call per layer of
the card, each on that layer's own K and V (ctx tokens, the card's KV heads; separate buffers, as
a real cache has, so no layer finds the previous one's KV in L2) against one query token with the
card's query heads. Two arms, ABBA in one session (decodegap.core.cells.LAYER_ARMS):

    layer-op       the host launches the calls one by one, as an op-by-op decode step does: the
                   time per layer is the larger of the host's launch cost and the kernel's time
    layer-graphed  the same calls captured once as a CUDA graph and replayed: kernel time and the
                   device's own gaps, no host launch

so us/layer of each arm, and their difference, separate launch cost from kernel time (the analysis
reads these arms' CUDA-event times: the host clock also holds the step's sync and token read). No weights
are built: the memory floor of a step is the KV it reads (core.floor.MemoryFloor with W = 0).
The decoders follow decodegap.measure.modes' interface, so the session times them as it times a
decode step (warm-up, probe, blocks, profiler pass).
"""

from __future__ import annotations

from decodegap.core.cells import LAYER_ARMS
from decodegap.core.errors import CellNotPossible
from decodegap.measure.modes import Decoder


def layer_shapes(card, ctx: int, layout: str) -> dict:
    """Shapes of one layer's call: q (one token), k and v (ctx tokens, KV heads), in `layout`."""
    a = card.architecture
    hq, hkv = a["num_attention_heads"], a["num_key_value_heads"]
    d = a.get("head_dim") or a["hidden_size"] // hq
    if hq % hkv:
        raise CellNotPossible(f"{card.key}: {hq} query heads are not a multiple of {hkv} KV heads")
    if layout == "bhsd":
        return {"q": (1, hq, 1, d), "kv": (1, hkv, ctx, d), "layers": a["num_hidden_layers"]}
    if layout == "bshd":
        return {"q": (1, 1, hq, d), "kv": (1, ctx, hkv, d), "layers": a["num_hidden_layers"]}
    raise ValueError(f"unknown layout {layout!r}")


class LayerDecoder(Decoder):
    """One step = the card's layers' attention calls, launched op by op."""

    mode = LAYER_ARMS[0]

    def __init__(self, card, path, ctx: int, device: str, dtype, seed: int):
        import torch

        s = layer_shapes(card, ctx, path.layout)
        self.layers, self.ctx, self.path = s["layers"], ctx, path
        g = torch.Generator(device=device).manual_seed(seed)
        self.q = torch.randn(s["q"], generator=g, device=device, dtype=dtype)
        # Keys and values with the spread real ones have after normalisation; each layer its own.
        self.k = [torch.randn(s["kv"], generator=g, device=device, dtype=dtype) for _ in range(self.layers)]
        self.v = [torch.randn(s["kv"], generator=g, device=device, dtype=dtype) for _ in range(self.layers)]
        self.call = path.layer_call()
        self.out = None
        self.steps = 0  # a step's "position": the session checks one step per launch

    @property
    def position(self):
        return _Scalar(self.ctx + self.steps)

    def prefill(self, input_ids=None) -> None:
        self._step()  # the first call compiles what compiles (flex); never timed
        self.steps = 0

    def _step(self) -> None:
        for q, k, v in zip([self.q] * self.layers, self.k, self.v):
            self.out = self.call(q, k, v)

    def launch(self) -> None:
        self._step()
        self.steps += 1

    def read_token(self) -> int:
        """Wait for the step's calls (a streaming step waits for its token) and return a checksum-free
        stand-in token: the output's first element's sign, read on the host."""
        return int(self.out.reshape(-1)[0].item() > 0)

    def kv_bytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in zip(self.k, self.v))


class GraphedLayerDecoder(LayerDecoder):
    """The same calls, captured once as a CUDA graph and replayed."""

    mode = LAYER_ARMS[1]
    capture_warmup_steps = 3

    def __init__(self, card, path, ctx, device, dtype, seed):
        if device != "cuda":
            raise CellNotPossible(f"{LAYER_ARMS[1]} needs CUDA graphs; device {device} has none")
        super().__init__(card, path, ctx, device, dtype, seed)
        self.graph = None

    def prepare(self) -> int:
        from decodegap.measure.modes import capture_graph

        self.graph = capture_graph(self._step, self.capture_warmup_steps)
        self.steps += self.capture_warmup_steps
        return self.capture_warmup_steps

    def launch(self) -> None:
        self.graph.replay()
        self.steps += 1


class _Scalar:
    """What decoder.position.item() gives a modes decoder: the session reads positions that way."""

    def __init__(self, value: int):
        self.value = value

    def item(self) -> int:
        return self.value


LAYER_DECODERS = {LAYER_ARMS[0]: LayerDecoder, LAYER_ARMS[1]: GraphedLayerDecoder}


def make_layer_decoder(arm: str, card, path, ctx: int, device: str, dtype, seed: int):
    return LAYER_DECODERS[arm](card, path, ctx, device, dtype, seed)
