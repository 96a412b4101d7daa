"""bnb-nf4: bitsandbytes' 4-bit NormalFloat through its fused 4-bit GEMM."""

from __future__ import annotations

from decodegap.measure.weights.base import PackedWeights


class BnbNf4Weights(PackedWeights):
    """bitsandbytes' 4-bit NormalFloat (NF4): 4 bits per weight in blocks of 64 with one float32
    absmax per block, no double quantization (transformers' BitsAndBytesConfig defaults, as a
    `load_in_4bit` model has them); one token goes through `matmul_4bit`, which bitsandbytes 0.50
    runs as its fused 4-bit GEMM kernel (`gemm_4bit`). The NF4 code table is counted with the stored
    weights (64 bytes a layer) though that kernel has the table built in."""

    name = "bnb-nf4"
    package = "bitsandbytes"
    requirement = "bitsandbytes==0.50.2"
    module = "bitsandbytes"
    install = "pip install bitsandbytes (prebuilt CUDA libraries per CUDA version)"
    blocksize = 64
    double_quant = False

    def bytes_per_layer(self, n: int, k: int) -> int:
        return n * k // 2 + (n * k // self.blocksize) * 4 + 16 * 4  # 4-bit values; a float32 absmax per block; the NF4 table

    def pack(self, linear):
        return _bnb_linear_class()(linear, self.blocksize, self.double_quant)

    def dense(self, packed, linear):
        import bitsandbytes as bnb

        return bnb.functional.dequantize_4bit(packed.weight_packed, packed.quant_state)


def _bnb_linear_class():
    import torch

    class _Nf4Linear(torch.nn.Module):
        def __init__(self, linear, blocksize: int, double_quant: bool):
            import bitsandbytes as bnb

            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            packed, qs = bnb.functional.quantize_4bit(linear.weight.detach(), blocksize=blocksize, quant_type="nf4",
                                                      compress_statistics=double_quant, quant_storage=torch.uint8)
            self.quant_state = qs
            self.register_buffer("weight_packed", packed)
            # The quant state's tensors are stored weights too: absmax per block, the NF4 code table,
            # and with double quantization the absmax's own absmax and code.
            self.register_buffer("absmax", qs.absmax)
            self.register_buffer("code", qs.code)
            names = ["weight_packed", "absmax", "code"]
            if qs.nested:
                self.register_buffer("absmax2", qs.state2.absmax)
                self.register_buffer("code2", qs.state2.code)
                names += ["absmax2", "code2"]
            self.weight_buffers = tuple(names)
            self.bias = linear.bias

        def forward(self, x):
            import bitsandbytes as bnb

            return bnb.matmul_4bit(x, self.weight_packed.t(), quant_state=self.quant_state, bias=self.bias)

    return _Nf4Linear


PATH = BnbNf4Weights()
