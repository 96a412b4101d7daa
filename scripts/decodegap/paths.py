"""The one path grammar. Every raw session lives at

    results/raw/{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}/s{session:02d}.json

Keys never contain '_' (it separates attn, quant and mode) or '/'. The Snakefile and the package
both take the pattern from here; nothing else builds these paths.
"""

from __future__ import annotations

import re
from pathlib import Path

from decodegap.errors import ConfigError

RAW_ROOT = "results/raw"
# Snakemake pattern ({session} is the zero-padded text, e.g. "03").
RAW_SESSION = RAW_ROOT + "/{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}/s{session}.json"
KEY_RE = r"[a-z0-9][a-z0-9.\-]*"
WILDCARD_CONSTRAINTS = {
    "gpu": KEY_RE,
    "model": KEY_RE,
    "ctx": r"[0-9]+",
    "attn": KEY_RE,
    "quant": KEY_RE,
    "mode": KEY_RE,
    "session": r"[0-9][0-9]+",  # no braces: Snakemake patterns cannot hold them
}
_SESSION_RE = re.compile(
    r"(?:^|/)results/raw/(?P<gpu>{k})/(?P<model>{k})/ctx(?P<ctx>[0-9]+)/(?P<attn>{k})_(?P<quant>{k})_(?P<mode>{k})/s(?P<session>[0-9]{{2,}})\.json$".format(
        k=KEY_RE
    )
)
CELL_KEYS = ("gpu", "model", "ctx", "attn", "quant", "mode")


def check_key(name: str, value: str) -> str:
    if not re.fullmatch(KEY_RE, str(value)):
        raise ConfigError(f"{name} key '{value}' must match {KEY_RE} (lowercase, digits, '.', '-'; no '_' or '/')")
    return value


def session_path(gpu: str, model: str, ctx: int, attn: str, quant: str, mode: str, session: int, root: str | Path = ".") -> Path:
    for name, value in (("gpu", gpu), ("model", model), ("attn", attn), ("quant", quant), ("mode", mode)):
        check_key(name, value)
    rel = RAW_SESSION.format(gpu=gpu, model=model, ctx=int(ctx), attn=attn, quant=quant, mode=mode, session=f"{int(session):02d}")
    return Path(root) / rel


def parse_session_path(path: str | Path) -> dict | None:
    """Cell keys and session index from a raw session path, or None if it does not follow the grammar."""
    m = _SESSION_RE.search(Path(path).as_posix())
    if not m:
        return None
    d = m.groupdict()
    d["ctx"] = int(d["ctx"])
    d["session"] = int(d["session"])
    return d
