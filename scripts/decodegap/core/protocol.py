"""The measurement protocol, defined once, and whether a session's samples can be trusted.

`Protocol` is the one definition of the protocol's fields: the measure command's flags are made
from it (`add_arguments`), every record states it (`as_record`), and tests check the config schema
and the session schema against it (field names, bounds, defaults).

Invalid is data: the record keeps its samples and says why in `reasons`; `warnings` flag what a
reader should know but does not void the cell.

Spread follows pyperf: a standard deviation of 10 % of the mean or more means the timing is
unstable (invalid); a minimum or maximum 50 % off the mean is flagged as a warning.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, fields


def _field(default, help: str, minimum=None, exclusive_minimum=None, maximum=None):
    return field(default=default, metadata={"help": help, "minimum": minimum, "exclusive_minimum": exclusive_minimum, "maximum": maximum})


@dataclass(frozen=True)
class Protocol:
    warmup_steps: int = _field(8, "labelled warm-up steps per arm, never in the samples", minimum=0, maximum=10000)
    timed_steps: int = _field(128, "timed steps of a single-mode session", exclusive_minimum=0, maximum=100000)
    ab_blocks: int = _field(8, "blocks per arm of an A/B session (order ABBA ABBA ...)", exclusive_minimum=0, maximum=1000)
    ab_block_steps: int = _field(16, "steps per block", exclusive_minimum=0, maximum=10000)
    layer_block_steps: int = _field(96, "least steps per block of a layer session (mode layer: a step is one attention call per layer, "
                                        "0.2-30 ms; a session lengthens its blocks so its fastest arm times 2 x min_duration_s)",
                                    exclusive_minimum=0, maximum=10000)
    min_samples: int = _field(64, "a session with fewer timed steps per arm is invalid", exclusive_minimum=0, maximum=100000)
    min_duration_s: float = _field(0.2, "a session with less timed host time per arm is invalid", minimum=0, maximum=3600)
    max_rel_stdev: float = _field(0.10, "pyperf: a stdev of this fraction of the mean or more marks the session unstable", exclusive_minimum=0, maximum=1000)
    outlier_rel: float = _field(0.50, "pyperf: a min or max this fraction off the mean is a warning", exclusive_minimum=0, maximum=1000)
    step_probe_iterations: int = _field(2000, "CPU-speed probe loop run before and after every timed step, outside its timing (0: off)", minimum=0, maximum=10**7)
    profile_steps: int = _field(3, "steps per arm run under the profiler after the timed ones, never timed: kernels and GPU busy time per step (0: off)", minimum=0, maximum=100)

    def __post_init__(self):
        for f in fields(self):
            value, lo, ex, hi = (getattr(self, f.name), f.metadata["minimum"], f.metadata["exclusive_minimum"], f.metadata["maximum"])
            if not isinstance(value, (int, float)) or isinstance(value, bool) or (f.type == "int" and not isinstance(value, int)):
                raise ValueError(f"protocol.{f.name} must be a{'n integer' if f.type == 'int' else ' number'}, got {value!r}")
            if not math.isfinite(value):  # a comparison with NaN is always false: say it plainly
                raise ValueError(f"protocol.{f.name} must be a finite number, got {value}")
            if (lo is not None and not value >= lo) or (ex is not None and not value > ex) or (hi is not None and not value <= hi):
                bound = f">= {lo}" if lo is not None else f"> {ex}"
                raise ValueError(f"protocol.{f.name} must be {bound} and <= {hi}, got {value}")

    def as_record(self) -> dict:
        return asdict(self)

    @staticmethod
    def add_arguments(parser) -> None:
        """One command-line flag per field: --warmup-steps, --timed-steps, ..."""
        for f in fields(Protocol):
            kind = int if f.type == "int" else float
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default, help=f"{f.metadata['help']} (default: %(default)s)")

    @classmethod
    def from_args(cls, args) -> "Protocol":
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    @classmethod
    def from_record(cls, stated: dict) -> "Protocol":
        """The protocol a record states (fields it predates take their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stated.items() if k in names})


def layer_block_steps(protocol: Protocol, warmup_host_ms: list[list[float]]) -> int:
    """Steps per block of a layer session: at least protocol.layer_block_steps, and enough that the
    fastest arm (by its median warm-up step) times twice min_duration_s over its ab_blocks blocks.
    A graphed layer step can take 0.2 ms and a math one 25 ms, so no fixed count suits both: too few
    and the graphed arm is "too short", too many and the slow paths take minutes per session."""
    medians_ms = [statistics.median(ms) for ms in warmup_host_ms if ms]
    if not medians_ms or min(medians_ms) <= 0:
        return protocol.layer_block_steps
    needed = math.ceil(2 * protocol.min_duration_s * 1e3 / (protocol.ab_blocks * min(medians_ms)))
    return max(protocol.layer_block_steps, needed)


def judge_arm(mode: str, host_ms: list[float], protocol: Protocol) -> tuple[list[str], list[str]]:
    reasons, warnings = [], []
    n = len(host_ms)
    if n < protocol.min_samples:
        reasons.append(f"too few samples: {mode} has {n} < {protocol.min_samples}")
    if n == 0:
        return reasons, warnings
    duration_s = sum(host_ms) / 1e3
    if duration_s < protocol.min_duration_s:
        reasons.append(f"too short: {mode} timed {duration_s:.3f} s < {protocol.min_duration_s} s")
    if n >= 2:
        mean = statistics.fmean(host_ms)
        rel = statistics.stdev(host_ms) / mean
        if rel >= protocol.max_rel_stdev:
            reasons.append(f"unstable: {mode} stdev is {rel:.1%} of the mean (limit {protocol.max_rel_stdev:.0%})")
        lo, hi = min(host_ms), max(host_ms)
        if lo <= mean * (1 - protocol.outlier_rel) or hi >= mean * (1 + protocol.outlier_rel):
            warnings.append(
                f"outliers: {mode} min {lo:.3f} ms / max {hi:.3f} ms against mean {mean:.3f} ms"
            )
    return reasons, warnings


def judge_session(arms: list[dict], protocol: Protocol, foreign: list[dict], throttled: list[str]) -> tuple[list[str], list[str]]:
    """Reasons (invalidating) and warnings for a session whose arms all ran."""
    reasons, warnings = [], []
    for arm in arms:
        r, w = judge_arm(arm["mode"], arm["timed"]["host_ms"], protocol)
        reasons += r
        warnings += w
        if arm["final_position"] != arm["expected_position"]:
            reasons.append(
                f"not one token per step: {arm['mode']} ended at position {arm['final_position']}, "
                f"expected {arm['expected_position']}"
            )
    for proc in foreign:
        reasons.append(f"foreign GPU process: pid {proc['pid']} {proc['name']} ({proc['used_memory_MiB']:.0f} MiB)")
    if throttled:
        reasons.append(f"clocks throttled: {', '.join(sorted(set(throttled)))}")
    return reasons, warnings


SAMPLE_REASONS = ("too few samples:", "too short:", "unstable:", "not one token per step:")  # what the samples decide


def sample_reasons(arms: list[dict], protocol: Protocol) -> list[str]:
    """The reasons a session's own samples give under `protocol`: count, duration, spread, one token per step."""
    out = []
    for arm in arms:
        out += judge_arm(arm["mode"], arm["timed"]["host_ms"], protocol)[0]
        if arm["final_position"] != arm["expected_position"]:
            out.append(f"not one token per step: {arm['mode']} ended at position {arm['final_position']}, "
                       f"expected {arm['expected_position']}")
    return out


def contradictions(record: dict) -> list[str]:
    """Where a record's status disagrees with its own data, judged by the protocol it states: a
    record that says valid must pass every check of its samples (count, duration, spread, one token
    per step) and carry no reason; one that says invalid must say why, and the reasons it gives about
    its samples must be exactly those its samples give (a made-up or a dropped reason is refused)."""
    stated = [r for r in record["reasons"] if r.startswith(SAMPLE_REASONS)]
    protocol = Protocol.from_record(record["protocol"])
    if record["status"] == "invalid":
        if not record["reasons"]:
            return ["says invalid but gives no reason"]
        if record["arms"] and not record.get("error"):
            computed = sample_reasons(record["arms"], protocol)
            if sorted(computed) != sorted(stated):
                return [f"its reasons about its samples ({'; '.join(stated) or 'none'}) are not what its samples give under its "
                        f"own protocol ({'; '.join(computed) or 'none'})"]
        return []
    out = []
    if record["reasons"]:
        out.append(f"says valid but lists reasons: {'; '.join(record['reasons'])}")
    if record.get("error"):
        out.append(f"says valid but records an error: {record['error'].get('kind')}")
    if not record["arms"]:
        out.append("says valid but has no measured arm")
    out += [f"says valid, but {r}" for r in sample_reasons(record["arms"], protocol)]
    return out
