"""The paper's published figures (config/reference/paper.yaml) and their match in our data."""

from __future__ import annotations

from pathlib import Path

from decodegap.core.config import REPO_ROOT, load_yaml
from decodegap.core.errors import ConfigError

PAPER_YAML = REPO_ROOT / "config" / "reference" / "paper.yaml"
MATCH_FIELDS = ("gpu", "model", "ctx", "quant", "mode")
# Quantities we can reproduce from a cell's statistics, and how.
COMPARABLE = {"r_floor", "ms_per_step", "speedup", "speedup_ci_low", "speedup_ci_high", "n_sessions"}


def load_reference(path: str | Path = PAPER_YAML) -> list[dict]:
    data = load_yaml(path) or {}
    figures = data.get("figures")
    if not isinstance(figures, list):
        raise ConfigError(f"{path}: expected a `figures:` list")
    keys = set()
    for i, f in enumerate(figures):
        for field in ("key", "quantity", "value", "sources"):
            if field not in f:
                raise ConfigError(f"{path}: figures[{i}] lacks '{field}'")
        if f["key"] in keys:
            raise ConfigError(f"{path}: duplicate key '{f['key']}'")
        keys.add(f["key"])
    return figures


def candidates(figure: dict, stats: list[dict]) -> list[dict]:
    """Cell statistics that a published figure speaks of: every field it states must agree."""
    out = []
    for s in stats:
        cell = s["cell"]
        if figure.get("gpu") is None or cell["gpu"] != figure["gpu"]:
            continue
        if any(figure.get(f) is not None and cell[f] != figure[f] for f in ("model", "ctx", "quant")):
            continue
        mode = figure.get("mode")
        if mode is not None and cell["mode"] != mode:
            continue
        out.append(s)
    return out


def reproduced(figure: dict, stats: list[dict]) -> tuple[float | None, dict | None, str]:
    """(our value, the cell stats it came from, a note) for one published figure."""
    q = figure["quantity"]
    if q not in COMPARABLE:
        return None, None, "not a measured quantity"
    matches = [s for s in candidates(figure, stats) if (s.get("completed") or {}).get("arms")]  # the headline scope
    if not matches:
        return None, None, "not measured"
    if len(matches) > 1:
        return None, None, f"ambiguous: {len(matches)} cells match"
    s = matches[0]
    scope = s["completed"]
    if q in ("r_floor", "ms_per_step"):
        arm = s["arms"][0] if len(s["arms"]) == 1 else None
        if arm is None:
            return None, None, "A/B cell"
        a = scope["arms"][arm]
        return (a["r_floor"] if q == "r_floor" else a["median_ms"]), s, ""
    sp = scope.get("speedup")
    if not sp:
        return None, None, "no speedup"
    if q == "speedup":
        return sp["estimate"], s, ""
    if q == "n_sessions":
        return float(sp["n_sessions"]), s, ""
    ci = sp.get("ci")
    if not ci:
        return None, None, "no interval"
    return (ci[0] if q == "speedup_ci_low" else ci[1]), s, ""
