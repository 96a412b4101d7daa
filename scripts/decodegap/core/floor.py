"""The analytic memory floor of one batch-1 decode step.

A decode step must at least stream every stored weight byte (W) and the KV cache at the current
context (K) through device memory once, so no step can be faster than

    t_floor = (W + K) / B_peak

with B_peak the datasheet bandwidth. R_floor = t_floor / t_obs is the fraction of that floor a
measured step reaches (1.0 = the step runs at the datasheet bandwidth). Against the measured copy
bandwidth instead of the datasheet, the same ratio gives R against the reachable ceiling.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


def t_floor_s(weight_bytes: float, kv_bytes: float, b_peak_Bps: float) -> float:
    """The memory floor in seconds: (W + K) / B_peak."""
    if b_peak_Bps <= 0:
        raise ValueError(f"bandwidth must be positive, got {b_peak_Bps}")
    return (weight_bytes + kv_bytes) / b_peak_Bps


def r_floor(floor_s: float, t_obs_s: float) -> float:
    """Fraction of the floor reached: t_floor / t_obs."""
    if t_obs_s <= 0:
        raise ValueError(f"observed step time must be positive, got {t_obs_s}")
    return floor_s / t_obs_s


def kv_bytes(kv_bytes_per_token: int, ctx: int) -> int:
    """KV-cache bytes a step reads at context length ctx."""
    return kv_bytes_per_token * ctx


@dataclass(frozen=True)
class MemoryFloor:
    """Everything the floor of one cell depends on, with both floors derived from it."""

    weight_bytes: int  # weights as stored on the device, quantized layout and scales included
    weight_bytes_no_embedding: int  # minus the input-embedding table (a step reads one row of it)
    kv_bytes: int
    b_peak_Bps: float
    copy_bandwidth_Bps: float | None = None  # measured device copy bandwidth (read + write)

    @property
    def t_floor_s(self) -> float:
        return t_floor_s(self.weight_bytes, self.kv_bytes, self.b_peak_Bps)

    @property
    def t_floor_no_embedding_s(self) -> float:
        return t_floor_s(self.weight_bytes_no_embedding, self.kv_bytes, self.b_peak_Bps)

    @property
    def t_ceiling_s(self) -> float | None:
        """The same bytes at the measured copy bandwidth: the floor this device can reach."""
        if not self.copy_bandwidth_Bps:
            return None
        return t_floor_s(self.weight_bytes, self.kv_bytes, self.copy_bandwidth_Bps)

    def as_record(self) -> dict:
        out = asdict(self)
        out.update(
            t_floor_s=self.t_floor_s,
            t_floor_no_embedding_s=self.t_floor_no_embedding_s,
            t_ceiling_s=self.t_ceiling_s,
        )
        return out
