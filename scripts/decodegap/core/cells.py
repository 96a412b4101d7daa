"""What the Snakefile needs, importable and tested: the decode modes, the validated config, the
cells it names, which sessions each wants, and every target (paths from decodegap.core.paths).
workflow/rules/common.smk is a thin layer over this module.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decodegap.core import manifest, paths, registry
from decodegap.core.config import GPUS_YAML, MODELS_YAML, REPO_ROOT, load_gpus, load_models, load_yaml
from decodegap.core.errors import ConfigError, RawFileError

CONFIG_SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


def schema_with_keys(gpu_keys, model_keys) -> dict:
    """The config schema with its key enums filled in from what really exists: the GPU and model
    tables' keys, the attention and weight paths' unit files (decodegap.core.registry) and the
    decode modes."""
    schema = copy.deepcopy(load_yaml(CONFIG_SCHEMA))
    d = schema["$defs"]
    d["gpu_key"]["enum"] = sorted(gpu_keys)
    d["model_key"]["enum"] = sorted(model_keys)
    d["attn_key"]["enum"] = sorted(registry.unit_names("attention"))
    d["quant_key"]["enum"] = sorted(registry.unit_names("weights"))
    d["mode_key"]["enum"] = list(MODE_NAMES)
    d["ab_mode_key"]["enum"] = list(AB_MODES)
    return schema


def _fill_defaults(schema: dict, node: dict) -> None:
    for key, sub in schema.get("properties", {}).items():
        if key not in node and "default" in sub:
            node[key] = copy.deepcopy(sub["default"])
        if isinstance(node.get(key), dict) and sub.get("type") == "object":
            _fill_defaults(sub, node[key])


def _non_finite(node, where: str = "") -> list[tuple[str, float]]:
    import math

    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _non_finite(v, f"{where}.{i}")]
    return [(where, node)] if isinstance(node, float) and not math.isfinite(node) else []


def validate_config(config: dict, gpus_yaml=GPUS_YAML, models_yaml=MODELS_YAML) -> dict:
    """Check `config` against the schema; fill defaults; raise ConfigError naming the key."""
    import jsonschema

    raw_gpus = load_yaml(gpus_yaml) or {}
    overrides = config.get("gpus") or {}
    models = load_models(models_yaml)
    schema = schema_with_keys(set(raw_gpus) | set(overrides), set(models))
    config = copy.deepcopy(config)
    bad = _non_finite(config)
    if bad:  # YAML's .nan and .inf pass a schema's bounds (every comparison with NaN is false): say so first
        raise ConfigError("config does not match workflow/schemas/config.schema.yaml:\n  " + "\n  ".join(f"{k}: {v!r} is not a finite number" for k, v in bad[:8]))
    # `--config measure=true` (and a profile's `config:` list) arrives as a string
    if isinstance(config.get("measure"), str) and config["measure"].lower() in ("true", "false", "1", "0", "yes", "no"):
        config["measure"] = config["measure"].lower() in ("true", "1", "yes")
    _fill_defaults(schema, config)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:8]:
            where = ".".join(str(p) for p in e.absolute_path) or "<top level>"
            if e.validator == "additionalProperties":
                lines.append(f"{where}: {e.message} (allowed: {', '.join(sorted(e.schema.get('properties', {})))})")
            elif e.validator == "enum":
                lines.append(f"{where}: {e.instance!r} is not one of {', '.join(map(str, e.validator_value))}")
            else:
                lines.append(f"{where}: {e.message}")
        raise ConfigError("config does not match workflow/schemas/config.schema.yaml:\n  " + "\n  ".join(lines))
    load_gpus(gpus_yaml, overrides)  # field checks on the merged GPU table
    engines = config.get("engines") or {}
    for key, values, partners in (("modes", engines.get("modes") or [], engines.get("quant") or []),
                                  ("quant", engines.get("quant") or [], engines.get("modes") or [])):
        for i, v in enumerate(values):  # each engine reads some listed format, and each format has its engine
            pairs = [(v, o) if key == "modes" else (o, v) for o in partners]
            if pairs and all(mode_quant_problem(m, q) for m, q in pairs):
                raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  engines.{key}.{i}: {v!r} makes no cell: "
                                  + mode_quant_problem(*pairs[0]))
    for i, exp in enumerate(config.get("ab") or []):
        why = mode_quant_problem(exp.get("mode", ""), exp.get("quant", "bf16")) if exp.get("mode", "").startswith("ab-") else None
        if why:
            raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  ab.{i}: {why}")
    for md in (config.get("attention") or {}).get("step_modes") or []:  # the attention experiment's steps run bf16
        why = mode_quant_problem(md, "bf16")
        if why:
            raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  attention.step_modes: {why}")
    for section in ("matrix", "quantization", "floor"):
        sec = config.get(section) or {}
        for q in sec.get("quant") or sec.get("paths") or []:
            for md in sec.get("modes") or []:
                why = mode_quant_problem(md, q)
                if why:
                    raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  {section}: {why}")
    floor = config.get("floor") or {}
    for i, q in enumerate(floor.get("compiled_quant") or []):
        if q not in (floor.get("quant") or []):
            raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  floor.compiled_quant.{i}: {q!r} is not one of "
                              f"floor.quant ({', '.join(floor.get('quant') or [])}): a compiled arm is measured only for a path the floor measures")
    for i, q in enumerate(floor.get("quant") or []):
        if floor.get("gpus") and not registry.composes_with_compile(q):
            takes = ", ".join(n for n in registry.unit_names("weights") if registry.composes_with_compile(n))
            raise ConfigError(f"config does not match workflow/schemas/config.schema.yaml:\n  floor.quant.{i}: {q!r} does not compose "
                              f"with a compiled or fused step (its kernel is not one op a graph can hold); paths that do: {takes}")
    return config


# The decode modes (decodegap.measure.modes.MODES implements each); an A/B mode is ab-<arm>-<arm>.
MODE_NAMES = ("eager", "static", "graphed", "compiled", "fused", "generate", "llamacpp")
# Engines that own their decode loop (transformers' `generate`): the session cannot interleave their
# steps with another arm's, so they run as single-arm cells only, never in an A/B pair.
OWN_LOOP = ("generate",)
# Engines that run their own model (llama.cpp on a GGUF file): no transformers model to share with
# another arm, so single-arm cells too, and their weights are the engine's own formats.
OWN_MODEL = ("llamacpp",)
SINGLE_ARM = OWN_LOOP + OWN_MODEL


def gguf_format(quant: str) -> str:
    """llama.cpp's name of the GGUF format a weight path names: gguf-q4-k-m -> q4_k_m."""
    return quant.removeprefix("gguf-").replace("-", "_")


def gguf_quant(fmt: str) -> str:
    """The weight path of llama.cpp's GGUF format `fmt`: q4_k_m -> gguf-q4-k-m."""
    return "gguf-" + fmt.replace("_", "-")
AB_MODES = tuple(f"ab-{a}-{b}" for a in MODE_NAMES for b in MODE_NAMES if a != b and a not in SINGLE_ARM and b not in SINGLE_ARM)


def mode_quant_problem(mode: str, quant: str) -> str | None:
    """Why a mode cannot run a weight path, or None: llama.cpp reads only its GGUF formats (the
    weight paths whose unit names an `ENGINE = "llamacpp"`), no other mode reads those, and
    transformers' generate runs the dense bf16 model."""
    engine = registry.weight_engine(quant)
    arms = [mode] if mode in MODE_NAMES else []
    if mode in OWN_MODEL and engine != mode:
        takes = ", ".join(n for n in registry.unit_names("weights") if registry.weight_engine(n) == mode)
        return f"mode '{mode}' runs its own model from a file in one of its formats ({takes}), not the weight path '{quant}'"
    if engine is not None and engine not in arms:
        return f"weight path '{quant}' is a file format of the engine '{engine}': only mode '{engine}' runs it, not '{mode}'"
    if mode in OWN_LOOP and quant != "bf16":  # generate's cells are measured on the dense model only
        return f"mode '{mode}' runs transformers' dense model (bf16), not the weight path '{quant}'"
    return None
PAPER_MODES = ("eager", "static", "graphed")  # the paper's ladder; compiled and fused go beyond it
OP_BY_OP = ("eager", "static")  # modes whose steps the host launches kernel by kernel
# Modes that run decodegap's own kernels, whose code changes between sessions of one cell: where a
# cell's sessions span versions of the measured code, their arm is read from the statistics' scope
# NEWEST_CODE (the newest version with two or more sessions; decodegap.analysis.stats.newest_code_sessions).
OWN_KERNELS = ("fused",)
NEWEST_CODE = "newest_code"
# The attention microbenchmark (decodegap.measure.layer): a cell of mode `layer` times one
# decode-shaped attention call per layer of the card, op by op and replayed from a graph, as two
# arms of one session.
LAYER_MODE = "layer"
LAYER_ARMS = ("layer-op", "layer-graphed")


def arms_of(mode: str) -> list[str]:
    """The decode modes a session measures: one, or two for an A/B mode `ab-<arm>-<arm>`."""
    if mode in MODE_NAMES:
        return [mode]
    if mode == LAYER_MODE:
        return list(LAYER_ARMS)
    if mode.startswith("ab-"):
        arms = mode[3:].split("-")
        if len(arms) == 2 and all(a in MODE_NAMES for a in arms) and arms[0] != arms[1]:
            owned = [a for a in arms if a in SINGLE_ARM]
            if owned:
                what = "decode loop" if owned[0] in OWN_LOOP else "model"
                raise ConfigError(f"mode '{mode}': {owned[0]} runs its own {what}, so it is measured alone (mode '{owned[0]}'), "
                                  "never as an arm of an A/B session")
            return arms
    known = ", ".join(list(MODE_NAMES) + [LAYER_MODE] + list(AB_MODES))
    raise ConfigError(f"unknown mode '{mode}' (known: {known})")


@dataclass(frozen=True)
class Cell:
    gpu: str
    model: str
    ctx: int
    attn: str
    quant: str
    mode: str

    @property
    def keys(self) -> dict:
        return {"gpu": self.gpu, "model": self.model, "ctx": self.ctx, "attn": self.attn, "quant": self.quant, "mode": self.mode}

    @property
    def dir(self) -> str:
        return paths.CELL.format(**self.keys)

    def raw_path(self, session: int) -> str:
        return paths.session_path(session=session, **self.keys).as_posix()

    @property
    def stats(self) -> str:
        return paths.CELL_STATS.format(**self.keys)

    @property
    def group(self) -> str:
        """The cell's (gpu, model, ctx) group: the analysis job that summarises it."""
        return paths.GROUP.format(gpu=self.gpu, model=self.model, ctx=self.ctx)

    @property
    def sessions_parquet(self) -> str:
        return paths.CELL_SESSIONS.format(**self.keys)

    @property
    def steps_parquet(self) -> str:
        return paths.CELL_STEPS.format(**self.keys)


class Plan:
    """The cells a config names, which sessions each wants, and every target path."""

    def __init__(self, config: dict, root: str | Path = ".", gpus_yaml=GPUS_YAML, models_yaml=MODELS_YAML):
        self.config = validate_config(config, gpus_yaml, models_yaml)
        self.root = Path(root)
        self.gpus = load_gpus(gpus_yaml, self.config.get("gpus"))
        self.models = load_models(models_yaml)
        m = self.config["matrix"]
        self.matrix = [
            Cell(g, mo, c, a, q, md)
            for g in m["gpus"] for mo in m["models"] for c in m["ctx"] for a in m["attn"] for q in m["quant"] for md in m["modes"]
        ]
        self.ab = {}
        for exp in self.config["ab"]:
            for g in exp["gpus"]:
                self.ab[Cell(g, exp["model"], exp["ctx"], exp["attn"], exp["quant"], exp["mode"])] = exp
        # The attention-backend experiment: per-layer cells (mode layer) over layer_ctx, and the
        # whole step with each path inside the model over step_ctx x step_modes.
        att = self.config.get("attention") or {}
        self.attention = []
        for g in att.get("gpus", []):
            for a in att["paths"]:
                self.attention += [Cell(g, mo, c, a, "bf16", LAYER_MODE) for mo in att["layer_models"] for c in att["layer_ctx"]]
                self.attention += [Cell(g, mo, c, a, "bf16", md) for mo in att["step_models"] for c in att["step_ctx"] for md in att["step_modes"]]
        # The weight-path experiment: whole-step cells per path for each (models x ctx) group.
        qz = self.config.get("quantization") or {}
        self.quantization = list(dict.fromkeys(
            Cell(g, mo, c, qz["attn"], q, md)
            for g in qz.get("gpus", []) for q in qz["paths"] for grp in qz["cells"] for mo in grp["models"] for c in grp["ctx"]
            for md in qz["modes"]))
        # Beyond the paper: compiled and fused steps against graphed, per model x ctx x weight path.
        fl = self.config.get("floor") or {}
        # A mode with a compiled arm only for the paths in compiled_quant (default: every path)
        compiled_quant = fl["quant"] if fl.get("compiled_quant") is None else fl["compiled_quant"]
        self.floor = [Cell(g, mo, c, fl["attn"], q, md) for g in fl.get("gpus", []) for mo in fl["models"] for c in fl["ctx"]
                      for q in fl["quant"] for md in fl["modes"] if "compiled" not in arms_of(md) or q in compiled_quant]
        # Beyond the paper: engines that own their decode loop (transformers' generate), per model x ctx
        en = self.config.get("engines") or {}
        # each engine with the formats it reads (generate: bf16; llamacpp: its GGUF formats)
        self.engines = [Cell(g, mo, c, en["attn"], q, md) for g in en.get("gpus", []) for mo in en["models"] for c in en["ctx"]
                        for q in en["quant"] for md in en["modes"] if mode_quant_problem(md, q) is None]
        self._check_contexts()
        problems = manifest.tree_problems(self.root)
        if problems:
            more = f"\n  ... and {len(problems) - 12} more" if len(problems) > 12 else ""
            raise RawFileError(f"the measured data under {self.root / 'results'} cannot be trusted as it stands "
                               f"({len(problems)} problem(s)); nothing was read:\n  " + "\n  ".join(problems[:12]) + more)
        self._listed = {rel for rel in manifest.read(self.root) if rel.startswith(paths.RAW_ROOT + "/")}
        self._existing: dict[Cell, list[str]] | None = None
        self.wanted = {c: m["sessions"] for c in self.matrix}
        for c, exp in self.ab.items():
            self.wanted[c] = max(self.wanted.get(c, 0), exp["sessions"])
        for c in self.attention:
            self.wanted[c] = max(self.wanted.get(c, 0), att["sessions"])
        for c in self.quantization:
            self.wanted[c] = max(self.wanted.get(c, 0), qz["sessions"])
        for c in self.floor:
            self.wanted[c] = max(self.wanted.get(c, 0), fl["sessions"])
        for c in self.engines:
            self.wanted[c] = max(self.wanted.get(c, 0), en["sessions"])
        self.existing_sessions(self.matrix[0])  # scan every cell now: a stray file fails at parse time

    def _check_contexts(self) -> None:
        """Every configured cell's context fits its card's positions, with the decode steps a session takes."""
        p = self.config["protocol"]
        steps = max(p["timed_steps"], p["ab_blocks"] * p["ab_block_steps"])
        headroom = 8 + p["warmup_steps"] + steps + p.get("profile_steps", 0) + 8  # as a session sizes its cache
        for cell in dict.fromkeys(self.matrix + list(self.ab) + self.attention + self.quantization + self.floor + self.engines):
            why = self.models[cell.model].ctx_problem(cell.ctx, 0 if cell.mode == LAYER_MODE else headroom)
            if why:
                raise ConfigError(f"config: cell {cell.dir}: {why}")

    @property
    def measure(self) -> bool:
        return bool(self.config["measure"])

    def existing_sessions(self, cell: Cell) -> list[str]:
        """The cell's recorded session files (paths relative to the working directory)."""
        if self._existing is None:
            self._existing = {c: self._scan(c) for c in self.cells()}
        return self._existing[cell] if cell in self._existing else self._scan(cell)

    def _scan(self, cell: Cell) -> list[str]:
        """Session files of one cell folder. A file named like a session but not canonically (s1.json,
        s001.json) would count a session twice or under a name no tool expects: it stops the run,
        naming the file and the canonical one of the same session."""
        folder = self.root / paths.session_path(session=0, **cell.keys).parent
        if not folder.is_dir():
            return []
        found = []
        for p in sorted(folder.glob("s*.json")):
            if paths.parse_session_path(p):
                found.append(p.relative_to(self.root).as_posix())
                continue
            digits = p.stem[1:]
            if digits.isdigit():
                twin = folder / paths.canonical_name(int(digits))
                also = f"; {twin.relative_to(self.root).as_posix()} is the file of session {int(digits)}" if twin.exists() else ""
                raise RawFileError(f"{p.relative_to(self.root).as_posix()}: not a canonical session file name "
                                   f"(sessions are named s00.json, s01.json, ..., s100.json){also}. Remove the stray copy "
                                   "or give it its canonical name; nothing was read")
        return found

    def raw_files(self, cell: Cell) -> list[str]:
        """The recorded sessions a cell's analysis reads. Never an output of any rule."""
        return self.existing_sessions(cell)

    def missing_sessions(self, cell: Cell) -> list[int]:
        """Wanted sessions not recorded yet: measurement jobs when measuring, else none (never a job
        for a GPU we lack)."""
        if not self.measure:
            return []
        recorded = {paths.parse_session_path(p)["session"] for p in self.existing_sessions(cell)}
        # a session the manifest lists is recorded, even where its file went missing (the plan then
        # stops at parse time, saying how to restore it): it is never measured again
        recorded |= {s for s in range(self.wanted.get(cell, 0)) if cell.raw_path(s) in self._listed}
        return [s for s in range(self.wanted.get(cell, 0)) if s not in recorded]

    def environment_paths(self, gpu: str) -> tuple[list[str], list[str]]:
        """The attention and weight paths the config names for a GPU type: what its environment
        stage checks."""
        cells = [c for c in self.cells() if c.gpu == gpu]
        return sorted({c.attn for c in cells}), sorted({c.quant for c in cells})

    def environment_layouts(self, gpu: str) -> list[str]:
        """The head layouts of the cards the config runs on a GPU type: the stage checks each."""
        return sorted({self.models[c.model].attention_layout for c in self.cells() if c.gpu == gpu})

    def environment_of(self, gpu: str) -> str | None:
        """A GPU type's newest environment record (the one its new sessions run under), or None."""
        rel = paths.current_environment(gpu, self.root)
        return rel

    def environment_records(self) -> list[str]:
        """What the report's environment table shows: each GPU type's newest record, and, when
        measuring, the stage's receipt for a GPU type with sessions to measure and no record yet."""
        gpus = sorted({c.gpu for c in self.cells()} | {p.name.split("@")[0].removesuffix(".json")
                                                       for p in (self.root / paths.ENVIRONMENT_ROOT).glob("*.json")})
        out = [r for g in gpus if (r := self.environment_of(g))]
        if self.measure:
            out += [paths.ENVIRONMENT_RECEIPT.format(gpu=g) for g in gpus
                    if not self.environment_of(g) and any(self.missing_sessions(c) for c in self.cells() if c.gpu == g)]
        return out

    def receipts(self, cell: Cell) -> list[str]:
        """The measure rule's outputs for a cell: one receipt per missing session."""
        return [paths.receipt_path(session=s, **cell.keys).as_posix() for s in self.missing_sessions(cell)]

    def cells(self) -> list[Cell]:
        return list(dict.fromkeys(self.matrix + list(self.ab) + self.attention + self.quantization + self.floor + self.engines))

    def analysed(self, cells=None) -> list[Cell]:
        """Cells with something to analyse: recorded sessions, or sessions about to be measured."""
        return [c for c in (cells if cells is not None else self.cells()) if self.raw_files(c) or self.missing_sessions(c)]

    def cell_from_wildcards(self, w) -> Cell:
        return Cell(w.gpu, w.model, int(w.ctx), w.attn, w.quant, w.mode)

    # --- report targets ------------------------------------------------------------------
    def matrix_gpus(self) -> list[str]:
        """GPUs with a matrix table: those with any measured (or, when measuring, wanted) cell."""
        return [g for g in self.config["matrix"]["gpus"] if any(c.gpu == g for c in self.analysed(self.matrix))]

    def matrix_stats(self, gpu: str | None = None) -> list[str]:
        return [c.stats for c in self.analysed(self.matrix) if gpu is None or c.gpu == gpu]

    def headline_stats(self) -> list[str]:
        """The ladder's cells: every GPU and mode at the headline model and context."""
        r = self.config["report"]
        cells = self.matrix + [c for c in self.floor if c.quant == "bf16"]  # and the compiled and fused steps
        return list(dict.fromkeys(c.stats for c in self.analysed(cells) if c.model == r["headline_model"] and c.ctx == r["headline_ctx"]))

    def ab_stats(self) -> list[str]:
        return [c.stats for c in self.analysed(list(self.ab))]

    def attention_cells(self) -> list[dict]:
        """The attention experiment's configured cells, as the tables list them."""
        return [c.keys for c in self.attention]

    def attention_stats(self) -> list[str]:
        """The attention experiment's cells with something to analyse (the whole-step sdpa cells
        are matrix cells too)."""
        return [c.stats for c in self.analysed(self.attention)]

    def quantization_cells(self) -> list[dict]:
        """The weight-path experiment's configured cells, as its table lists them."""
        return [c.keys for c in self.quantization]

    def quantization_stats(self) -> list[str]:
        """The weight-path experiment's cells with something to analyse (its bf16 cells may be
        matrix or A/B cells too: one cell, one analysis)."""
        return [c.stats for c in self.analysed(self.quantization)]

    def floor_cells(self) -> list[dict]:
        """The floor experiment's configured cells (modes compiled and fused), as its table lists them."""
        return [c.keys for c in self.floor]

    def floor_stats(self, quant: str | None = None) -> list[str]:
        return [c.stats for c in self.analysed(self.floor) if quant is None or c.quant == quant]

    # --- the cells each artifact reads (decodegap.analysis.artifacts) --------------------------
    def cell_set(self, name: str, gpu: str | None = None) -> list[Cell]:
        """The configured cells of a named set, in the order the tables list them."""
        r = self.config["report"]
        floor_bf16 = [c for c in self.floor if c.quant == "bf16"]
        floor_fused = [c for c in self.floor if c.quant == "bf16" or c.mode.endswith("-fused")]  # bf16's levers; every path's fused step
        engine_groups = {(c.gpu, c.model, c.ctx) for c in self.engines}
        sets = {
            "matrix": self.matrix, "ab": list(self.ab), "matrix+ab": self.matrix + list(self.ab), "attention": self.attention,
            "quantization": self.quantization, "floor": self.floor, "none": [],
            # the engines' own cells, and the floor experiment's arms (graphed, compiled, fused) at the same GPU, model and ctx
            "engines": self.engines + [c for c in self.floor if (c.gpu, c.model, c.ctx) in engine_groups],
            "headline": [c for c in self.matrix + floor_fused if c.model == r["headline_model"] and c.ctx == r["headline_ctx"]],
            "anatomy": self.matrix + list(self.ab) + floor_fused,
        }
        if name not in sets:
            raise ConfigError(f"unknown cell set '{name}' (known: {', '.join(sets)})")
        return [c for c in dict.fromkeys(sets[name]) if gpu is None or c.gpu == gpu]

    def artifact_stats(self, name: str, gpu: str | None = None) -> list[str]:
        """The statistics files of a set's cells that have something to analyse."""
        return [c.stats for c in self.analysed(self.cell_set(name, gpu))]

    def groups(self) -> dict[str, list[Cell]]:
        """The analysed cells by (gpu, model, ctx): one analysis job each (decodegap.core.paths.GROUP)."""
        out: dict[str, list[Cell]] = {}
        for c in self.analysed():
            out.setdefault(c.group, []).append(c)
        return out

    def group_cells(self, group: str) -> list[Cell]:
        return self.groups().get(group, [])

    def final_targets(self) -> list[str]:
        """The default target: the report, and the paper as one PDF where pdflatex is installed."""
        import shutil

        pdf = [paths.PAPER_PDF] if shutil.which("pdflatex") else []
        return [paths.PAPER_TABLES, paths.PROVENANCE, paths.ALL_SESSIONS, paths.ALL_STEPS, *pdf]


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)
