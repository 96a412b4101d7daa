"""Load config/gpus.yaml and config/models.yaml, checked, with errors that name the key and file."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from decodegap.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
GPUS_YAML = REPO_ROOT / "config" / "gpus.yaml"
MODELS_YAML = REPO_ROOT / "config" / "models.yaml"


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def lookup(table: Mapping[str, Any], key: str, what: str, source: str | Path) -> Any:
    """table[key], or a ConfigError that lists the known keys and the closest match."""
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"unknown {what} '{key}' in {source} (known: {', '.join(sorted(table))}){hint}")


@dataclass(frozen=True)
class GpuSpec:
    key: str
    display_name: str
    b_peak_Bps: float
    device: str = "cuda"
    device_name_match: str | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None
    price_usd_per_hour: float | None = None
    price_source: str | None = None
    price_date: str | None = None
    bandwidth_source: str | None = None
    slurm: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, key: str, entry: Mapping[str, Any], source: str | Path) -> "GpuSpec":
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{source}: gpu '{key}' must be a mapping, got {type(entry).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(entry) - known
        if unknown:
            raise ConfigError(f"{source}: gpu '{key}' has unknown field(s) {sorted(unknown)} (known: {sorted(known)})")
        for required in ("display_name", "b_peak_Bps"):
            if entry.get(required) is None:
                raise ConfigError(f"{source}: gpu '{key}' lacks '{required}'")
        try:
            b_peak = float(entry["b_peak_Bps"])
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: gpu '{key}'.b_peak_Bps must be a number, got {entry['b_peak_Bps']!r}") from None
        if b_peak <= 0:
            raise ConfigError(f"{source}: gpu '{key}'.b_peak_Bps must be positive, got {b_peak}")
        if entry.get("device", "cuda") not in ("cuda", "cpu"):
            raise ConfigError(f"{source}: gpu '{key}'.device must be 'cuda' or 'cpu', got {entry['device']!r}")
        fields = {k: v for k, v in entry.items() if v is not None and k != "key"}
        fields["b_peak_Bps"] = b_peak
        fields["slurm"] = dict(entry.get("slurm") or {})
        return cls(key=key, **fields)


def load_gpus(path: str | Path = GPUS_YAML, overrides: Mapping[str, Any] | None = None) -> dict[str, GpuSpec]:
    """GPU table from `path`, each entry updated field by field from `overrides` (a user's config)."""
    table = load_yaml(path) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: expected a mapping of gpu keys")
    merged = {k: dict(v) if isinstance(v, Mapping) else v for k, v in table.items()}
    for key, entry in (overrides or {}).items():
        if isinstance(entry, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **entry}
            if isinstance(entry.get("slurm"), Mapping) and isinstance(table[key].get("slurm"), Mapping):
                merged[key]["slurm"] = {**table[key]["slurm"], **entry["slurm"]}
        else:
            merged[key] = entry
    return {key: GpuSpec.from_dict(key, entry, path) for key, entry in merged.items()}


def load_models(path: str | Path = MODELS_YAML) -> dict[str, "ModelCard"]:
    from decodegap.cards import ModelCard

    table = load_yaml(path) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: expected a mapping of model keys")
    return {key: ModelCard.from_dict(key, entry, path) for key, entry in table.items()}
