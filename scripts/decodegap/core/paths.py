"""Every path the workflow reads or writes, in one place: the Snakefile's rules and the package
both take their paths from here, and nothing else builds them. Every raw session lives at

    results/raw/{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}/s{session:02d}.json

and each later stage mirrors the cell part of it under its own folder:

    results/receipts/<cell>/sNN.json                a measurement job's output (never the session)
    results/cells/<cell>/{sessions,steps}.parquet   aggregate (one job per <gpu>/<model>/ctx<ctx> group)
    results/stats/<cell>/stats.json                 statistics
    results/aggregate/{sessions,steps}.parquet      every cell's tables in one
    results/provenance/<table>.json                 every number a table rendered
    report/tables/<table>.tex, report/figures/<figure>.{pdf,png}, report/paper_tables.tex,
    report/paper.{tex,pdf}, report/provenance.json  the report
    logs/<stage>/...                                one log per job, mirroring its output

Keys never contain '_' (it separates attn, quant and mode) or '/'. The Snakefile and the package
both take the pattern from here; nothing else builds these paths.

A session has one canonical file name, `s` and its index zero-padded to two digits (s00, s07, s123):
`s7.json` or `s007.json` beside `s07.json` would count the same session twice, so the analysis
refuses any name that is not canonical.

No workflow rule ever outputs a raw session (Snakemake deletes a job's outputs before it reruns
it). A measurement job outputs a receipt instead, results/receipts/<cell>/s{session}.json, and
the measure command writes the session itself, with an exclusive create.
"""

from __future__ import annotations

import re
from pathlib import Path

from decodegap.core.errors import ConfigError

CELL = "{gpu}/{model}/ctx{ctx}/{attn}_{quant}_{mode}"
GROUP = "{gpu}/{model}/ctx{ctx}"  # the cells of one GPU, model and context: one analysis job
RAW_ROOT = "results/raw"
# Snakemake patterns ({session} is the zero-padded text, e.g. "03").
RAW_SESSION = RAW_ROOT + "/" + CELL + "/s{session}.json"
RECEIPT_ROOT = "results/receipts"
MEASURE_RECEIPT = RECEIPT_ROOT + "/" + CELL + "/s{session}.json"
# The environment stage's records of one GPU type (python -m decodegap.measure.setup): data, like
# sessions, never replaced; each stage writes a new file, {gpu}@<UTC time>.json (the first, older
# record of a type may be {gpu}.json), and the newest is the one new sessions run under. The stage's
# job outputs a receipt naming the record it wrote, never the record.
ENVIRONMENT_ROOT = "results/environment"
ENVIRONMENT_RECORD = ENVIRONMENT_ROOT + "/{gpu}.json"
ENVIRONMENT_STAMPED = ENVIRONMENT_ROOT + "/{gpu}@{stamp}.json"
ENVIRONMENT_RECEIPT = "results/receipts/environment/{gpu}.json"
# The manifest of every file under results/raw/ (sha256sum format), committed with the data.
MANIFEST = "results/raw.sha256"
CELL_SESSIONS = "results/cells/" + CELL + "/sessions.parquet"
CELL_STEPS = "results/cells/" + CELL + "/steps.parquet"
CELL_STATS = "results/stats/" + CELL + "/stats.json"
GROUP_CELLS = "results/cells/" + GROUP  # one analysis job's folders: every cell of the group inside
GROUP_STATS = "results/stats/" + GROUP
GROUP_LOG = "logs/cells/" + GROUP + ".log"


def group_of(cell_path: str) -> str:
    """The group folder (results/stats/<gpu>/<model>/ctx<ctx>) a cell's file lies in."""
    parts = Path(cell_path).parts
    for i, part in enumerate(parts):
        if part in ("stats", "cells") and i >= 1 and parts[i - 1] == "results":
            return Path(*parts[: i + 4]).as_posix()
    raise ValueError(f"{cell_path}: not a cell's file under results/stats/ or results/cells/")
ALL_SESSIONS = "results/aggregate/sessions.parquet"
ALL_STEPS = "results/aggregate/steps.parquet"
PAPER_TABLES = "report/paper_tables.tex"
PAPER_TEX = "report/paper.tex"  # the reproduced paper as one document (decodegap.analysis.paper)
PAPER_PDF = "report/paper.pdf"
PROVENANCE = "report/provenance.json"
MEASURE_LOG = "logs/measure/" + CELL + "/s{session}.log"
CELL_LOG = "logs/cells/" + CELL + ".log"


def table_tex(name: str) -> str:
    """A LaTeX table of the report (`name` may hold a wildcard, e.g. "matrix_{gpu}")."""
    return f"report/tables/{name}.tex"


def table_numbers(name: str) -> str:
    """The sidecar of every number a table rendered, for the provenance stage."""
    return f"results/provenance/{name}.json"


def figure(name: str) -> list[str]:
    """A figure of the report: its PDF, then its PNG."""
    return [f"report/figures/{name}.pdf", f"report/figures/{name}.png"]


def log(stage: str, name: str) -> str:
    """The log of one job of a stage (aggregate, figures, tables, report)."""
    return f"logs/{stage}/{name}.log"
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
    if d["session"] != f"{int(d['session']):02d}":
        return None  # s007.json: not the canonical name of session 7
    d["ctx"] = int(d["ctx"])
    d["session"] = int(d["session"])
    return d


def canonical_name(session: int) -> str:
    return f"s{int(session):02d}.json"


def environment_records(gpu: str, root: str | Path = ".") -> list[str]:
    """A GPU type's environment records, oldest first (relative to root): {gpu}.json, then
    {gpu}@<UTC time>.json in time order (the stamp sorts as text)."""
    folder = Path(root) / ENVIRONMENT_ROOT
    legacy = [folder / f"{gpu}.json"] if (folder / f"{gpu}.json").is_file() else []
    stamped = sorted(folder.glob(f"{gpu}@*.json"))
    return [p.relative_to(root).as_posix() for p in legacy + stamped]


def current_environment(gpu: str, root: str | Path = ".") -> str | None:
    """The record new sessions of a GPU type run under: its newest, or None before its first stage."""
    records = environment_records(gpu, root)
    return records[-1] if records else None


def record_of(path: str | Path) -> str:
    """An environment record's path, given the record or the stage's receipt that names it."""
    import json

    text = Path(path).read_text()
    doc = json.loads(text)
    if isinstance(doc, dict) and doc.get("schema") == RECEIPT_SCHEMA:
        return doc["record"]
    return Path(path).as_posix()


RECEIPT_SCHEMA = "decodegap.receipt/1"


def receipt_path(gpu: str, model: str, ctx: int, attn: str, quant: str, mode: str, session: int, root: str | Path = ".") -> Path:
    """Where the measure rule's receipt for one session goes (never the session itself)."""
    raw = session_path(gpu, model, ctx, attn, quant, mode, session)
    return Path(root) / RECEIPT_ROOT / raw.relative_to(RAW_ROOT)


def raw_of_receipt(receipt: str | Path) -> str:
    """The session a measure receipt stands for."""
    rel = Path(receipt).as_posix()
    head, sep, tail = rel.partition(RECEIPT_ROOT + "/")
    if not sep:
        raise ValueError(f"{receipt}: not under {RECEIPT_ROOT}/")
    return f"{head}{RAW_ROOT}/{tail}"
