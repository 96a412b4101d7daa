"""What every weight path shares: the bytes a model stores (W), the packed kernel's check against
float32, and the base class of a packed path. A path itself is one file beside this one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoredWeights:
    weight_bytes: int
    weight_bytes_no_embedding: int
    param_count: int  # parameters of the dense model, as built


# The packed check's tolerance, as a fraction of the reference output's RMS. A wrong layout, a
# wrong zero point or a dropped scale errs by the output's own size (a fraction near 1); a right
# kernel that accumulates split-K partial sums in bf16 errs by about 0.1 of it, and by how much
# depends on the configuration its autotuner picks on a given machine (gemlite failed a fixed 0.1
# absolute bound on one H200 and passed it on four others).
RELATIVE_TOLERANCE = 0.25


def gemv_disagrees(got, reference) -> str | None:
    """None when a kernel's GEMV output agrees with the float32 reference, else why not."""
    import torch

    if not bool(torch.isfinite(got).all()):
        return "wrong result: the output has non-finite values"
    rms = float(reference.pow(2).mean().sqrt())
    err = float((got - reference).abs().max())
    if err > RELATIVE_TOLERANCE * rms:
        return (
            f"wrong result: max abs error {err:.3g} against float32, over {RELATIVE_TOLERANCE} of the "
            f"output's RMS {rms:.3g}"
        )
    return None


def module_bytes(module) -> int:
    """Bytes one packed layer stores: its parameters and the buffers it names as weights, each storage once."""
    tensors = {t.data_ptr(): t for t in list(module.parameters()) + [getattr(module, n) for n in getattr(module, "weight_buffers", ())]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def stored_bytes(model) -> StoredWeights:
    """Bytes of the weights as stored: the parameters, and the buffers a packed layer names as its
    weight (`weight_buffers`: a packed int4 weight, its scales and zero points), each storage once.
    Other buffers (rotary frequencies) are not weights. The untied input embedding table is left
    out of the no-embedding count: a step reads one row of it. Tied, the output projection reads
    the whole table every step: nothing is subtracted."""
    seen: set[int] = set()
    total_bytes = 0
    packed = [getattr(m, name) for m in model.modules() for name in getattr(m, "weight_buffers", ())]
    for t in list(model.parameters()) + packed:  # parameters() yields a tied tensor once
        key = t.data_ptr()
        if key in seen or t.numel() == 0:
            continue
        seen.add(key)
        total_bytes += t.numel() * t.element_size()
    embed = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == embed.data_ptr()
    embed_bytes = 0 if tied else embed.numel() * embed.element_size()
    params = getattr(model, "decodegap_dense_params", None) or sum(p.numel() for p in model.parameters())
    return StoredWeights(total_bytes, total_bytes - embed_bytes, params)


class WeightPath:
    """A weight path: how the weights are stored on the device and which kernel multiplies by them.
    A unit (one file of this package) subclasses it and sets the fields below; the registry
    (decodegap.measure.weights) finds it by its file, the environment record names its package's
    version, and the config accepts its name."""

    name = ""
    package = "torch"  # the distribution that ships the kernel (the environment record names its version)
    requirement: str | None = None  # its pin (envs/measure-requirements.txt and pyproject.toml hold the same; tests/test_pins.py)
    module = ""  # what must import for the kernel to exist ("": torch itself)
    install = ""  # how the package is had, said with a missing-package reason
    min_capability: tuple[int, int] | None = None
    cuda_only = False  # no CPU kernel: on a CPU the check says so instead of running
    # The compiled and fused modes trace the path's kernel into one graph: only an aten op (or our
    # own kernels) composes; an extension or an autotuner Dynamo cannot follow does not.
    composes_with_compile = False

    def load(self):
        """Import (and, for a JIT path, compile) the kernel's package; raises when it cannot."""
        import importlib

        if self.module:
            importlib.import_module(self.module)

    def unavailable(self, device: str) -> str | None:
        """Why the kernel cannot run here (device, package, build, compute capability), or None."""
        if self.cuda_only and device != "cuda":  # before load(): a JIT path would try to compile for no GPU
            return f"{self.name} has a CUDA kernel only; device {device}"
        try:
            self.load()
        except Exception as exc:  # noqa: BLE001 - ImportError, or an import or build that fails inside
            lines = str(exc).strip().splitlines()
            what = f"`import {self.module or self.package}` fails ({type(exc).__name__}: {lines[0][:200] if lines else ''})"
            if isinstance(exc, ModuleNotFoundError):
                return f"package not installed: {what}" + (f"; {self.install}" if self.install else "")
            return f"its kernels do not build or load here: {what}"
        if device == "cuda" and self.min_capability:
            import torch

            cap = torch.cuda.get_device_capability()
            if cap < self.min_capability:
                lo = self.min_capability
                return f"no kernel for sm_{cap[0]}{cap[1]}: {self.name} needs compute capability {lo[0]}.{lo[1]} or newer"
        return None

    def check(self, device: str) -> str | None:
        """The environment stage's functional check: None when the path's batch-1 GEMV runs here and
        agrees with float32, else why not."""
        raise NotImplementedError

    def prepare(self, model):
        """The model with its weights in this path's storage (in place where it can)."""
        raise NotImplementedError

    def stored(self, model) -> StoredWeights:
        return stored_bytes(model)

    def bytes_per_layer(self, n: int, k: int) -> int:
        """Bytes the path stores for an n x k linear layer, from its format's definition."""
        raise NotImplementedError


class PackedWeights(WeightPath):
    """A quantized weight path: every linear layer of the decoder blocks is replaced by a module that
    holds the weight packed in the kernel's own storage format and multiplies through that kernel;
    the embeddings and the output projection stay bf16, as int4 checkpoints keep them. A path is one
    subclass: `pack` (a bf16 nn.Linear -> the packed module, whose `weight_buffers` name the tensors
    it stores) and `dense` (the float32 weight the packed module stands for: the check's reference)."""

    def pack(self, linear):
        raise NotImplementedError

    def dense(self, packed, linear):
        """The float32 weight the packed module stands for (from its stored tensors where the package
        can unpack them, else by quantizing the original `linear` the same way)."""
        raise NotImplementedError

    def check(self, device: str) -> str | None:
        """A batch-1 GEMV through the packed kernel at a card's shape (4096 -> 1024) against float32
        on the weights the packed layer stands for: None when it runs and agrees, else why not."""
        import torch

        why = self.unavailable(device)
        if why:
            return why
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        g = torch.Generator(device="cpu").manual_seed(0)
        lin = torch.nn.Linear(4096, 1024, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(1024, 4096, generator=g) / 64)
        x = torch.randn(1, 4096, generator=g)
        mod = self.pack(lin.to(device, dtype))
        with torch.no_grad():
            got = mod(x.to(device, dtype)).detach().float().cpu()
            reference = x @ self.dense(mod, lin).float().cpu().T
        why = gemv_disagrees(got, reference)
        if why:
            return why
        stored, expected = module_bytes(mod), self.bytes_per_layer(1024, 4096)
        if stored != expected:  # W would be wrong: the format is not what this path says it stores
            return f"stores {stored} bytes for a 1024 x 4096 layer, not the {expected} its format gives"
        return None

    def prepare(self, model):
        import torch

        model.decodegap_dense_params = sum(p.numel() for p in model.parameters())  # the card's parameters, before packing
        for layer in model.model.layers:
            for name, child in list(layer.named_modules()):
                if isinstance(child, torch.nn.Linear):
                    parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                    setattr(parent, name.rsplit(".", 1)[-1], self.pack(child))
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
        return model
