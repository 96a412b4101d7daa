r"""The one style of every figure of the report (decodegap.analysis.figures): colours, markers, text,
axes, legends and panel grids.

Categories. Each decode mode (decodegap.core.cells.MODE_NAMES and the attention microbenchmark's
LAYER_ARMS), each weight path and each attention path has one `Style` (colour, marker, line style,
legend label), the same in every figure: `mode_style`, `weight_style`, `attention_style` (or
`style_of(kind, name)`). The paths are the measurement's units (decodegap.core.registry.unit_names):
the known ones are pinned below; a path that is not pinned (a new unit file) gets a style derived
from its name alone (a hash into OVERFLOW, never a pinned colour), so it keeps it whatever other
paths come and go. Pin it in WEIGHT_STYLE or ATTENTION_STYLE to choose it. When a figure shows two
kinds at once, colour carries one and the marker the other (deployment: colour = mode, marker =
weight path); it says so in its legend's title.

Shared encodings: filled = measured here, hollow = published by the paper (`hollow`); a small black
cross beside a marker = no interval (one machine or session: `no_interval`); an interval that runs off the
axis ends in an arrowhead at its edge (`interval`), so one enormous interval (two machines: one
degree of freedom) never sets the axis: `span` sets it from the medians.

Text. Every user string (display names, keys) goes through `literal` (no mathtext) and `short` or
`join` (ellipsized / wrapped, so a long name never makes a figure huge). Glyphs DejaVu Sans lacks
(emoji, CJK) come from the first installed font of FALLBACK_FONTS that has them: a CJK font (Debian:
fonts-droid-fallback, fonts-noto-cjk or fonts-wqy-zenhei) for CJK, Symbola (fonts-symbola) for emoji.

Layout. `setup()` sets the rcParams (call it first in every figure function); `grid` wraps panels into
rows (never a strip wider than 3:1) in a constrained layout; `legend_below` puts one legend under
the axes, inside the figure; `log_axis` gives log axes plain-number ticks (2, 5, 10, 20, 50);
`save` writes PDF and PNG without timestamps.
"""

from __future__ import annotations

import math
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.font_manager
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from decodegap.core.cells import LAYER_ARMS, MODE_NAMES  # noqa: E402
from decodegap.core.registry import unit_names  # noqa: E402


@dataclass(frozen=True)
class Style:
    color: str
    marker: str
    label: str
    linestyle: str = "-"


# Decode modes: warm colours launch op by op from the host (eager, static), cool ones replay a graph.
MODE_STYLE = {
    "eager": Style("#D55E00", "o", "eager"),
    "static": Style("#E69F00", "D", "static"),
    "graphed": Style("#0072B2", "s", "graphed"),
    "compiled": Style("#CC79A7", "^", "compiled", "--"),
    "fused": Style("#009E73", "*", "fused", ":"),
    "generate": Style("#000000", "h", "generate", "-."),  # transformers' own loop (an engine, not a step of ours)
    "llamacpp": Style("#6A3D9A", "d", "llama.cpp", "-."),  # llama.cpp on a GGUF file (an engine with its own kernels)
    "layer-op": Style("#A0522D", "v", "op by op"),
    "layer-graphed": Style("#56B4E9", "P", "graphed"),
}
# Weight paths (decodegap/measure/weights/), the planned ones included: Paul Tol's muted colours,
# none a mode's, so a weight path's colour never reads as a mode.
WEIGHT_STYLE = {
    "bf16": Style("#4D4D4D", "o", "bf16"),
    "int4-tinygemm": Style("#332288", "s", "int4-tinygemm"),
    "bnb-nf4": Style("#CC6677", "v", "bnb-nf4"),
    "gemlite": Style("#117733", "P", "gemlite"),
    "awq-marlin": Style("#DDCC77", "^", "awq-marlin"),
    "gptq-exllamav2": Style("#AA4499", "D", "gptq-exllamav2"),
    "fp8": Style("#88CCEE", "X", "fp8"),
    "int4-triton": Style("#44AA99", "p", "int4-triton"),
    # llama.cpp's GGUF formats (Paul Tol's light colours)
    "gguf-f16": Style("#77AADD", ">", "gguf-f16"),
    "gguf-q8-0": Style("#EE8866", "<", "gguf-q8-0"),
    "gguf-q4-0": Style("#FFAABB", "8", "gguf-q4-0"),
    "gguf-q4-k-m": Style("#AAAA00", "H", "gguf-q4-k-m"),
}
# Attention paths (decodegap/measure/attention/).
ATTENTION_STYLE = {
    "sdpa": Style("#0072B2", "o", "sdpa"),
    "sdpa-flash": Style("#E69F00", "s", "sdpa-flash"),
    "sdpa-cudnn": Style("#009E73", "D", "sdpa-cudnn"),
    "sdpa-efficient": Style("#56B4E9", "v", "sdpa-efficient"),
    "sdpa-math": Style("#D55E00", "^", "sdpa-math"),
    "flex": Style("#CC79A7", "P", "flex"),
    "fa2": Style("#882255", "X", "fa2"),
    "fa3": Style("#332288", "p", "fa3"),
    "fa4": Style("#999933", "h", "fa4"),
    "flashinfer": Style("#000000", "d", "flashinfer"),
}
# The anatomy's parts of a step (decodegap.analysis.anatomy): greys up to the graphed step, then pale
# tints of the mode each part adds (static's launch tax, eager's cache and framework cost), so the
# modes' own ticks stand out on them.
ANATOMY_PART_COLORS = {"floor_ms": "#4D4D4D", "kernel_inefficiency_ms": "#9A9A9A", "graph_gaps_ms": "#D4D4D4",
                       "launch_tax_ms": "#F5CF80", "cache_framework_ms": "#F2AC8C"}
PINNED = {"mode": MODE_STYLE, "weights": WEIGHT_STYLE, "attention": ATTENTION_STYLE}
# For a name nobody pinned: colours and markers no pinned style of any kind uses first.
OVERFLOW_COLORS = ("#661100", "#6699CC", "#997700", "#EE7733", "#004488", "#EE99AA", "#994455", "#33BBEE")
OVERFLOW_MARKERS = ("<", ">", "8", "H", "d", "h", "p", "X")
UNSTATED = Style("#8C8C8C", "o", "mode unstated")  # a published figure whose mode the paper does not state

# Shared encodings
MARKER_AREA = 46          # scatter marker area (pt^2)
MARKER_SIZE = 5.5         # line marker size (pt)
HOLLOW_FACE = "white"     # published: a hollow marker, its edge in the category's colour
NO_INTERVAL = dict(marker="x", color="black", s=16, linewidths=1.0, zorder=6)  # beside the point (`no_interval`)
PANEL = (3.2, 2.5)        # inches of one panel
MAX_SIDE_IN = 11.0        # no figure side beyond this (x DPI: 2200 px)
DPI = 200
LABEL_CHARS = 40          # display names longer than this are ellipsized in legends and ticks
TITLE_CHARS = 46          # a title wraps at this width, in parts (a name is never split)

# Tried in this order for a glyph the default sans-serif font (DejaVu Sans) lacks; only the ones
# installed are used, so a machine without them draws what it can and warns about the rest.
# CJK fonts come before Symbola, which has a few ideographs of its own: a name is drawn in one face.
FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
                  "Droid Sans Fallback", "AR PL UMing CN", "Symbola", "Noto Sans Symbols", "Noto Sans Symbols2")
_rescanned = False


# ---------------------------------------------------------------------------------------------- categories

def _derived(kind: str, name: str) -> Style:
    """A style from the name alone (stable whatever else is registered), off every pinned colour."""
    h = zlib.crc32(f"{kind}:{name}".encode())
    return Style(OVERFLOW_COLORS[h % len(OVERFLOW_COLORS)], OVERFLOW_MARKERS[(h // len(OVERFLOW_COLORS)) % len(OVERFLOW_MARKERS)], str(name))


def style_of(kind: str, name) -> Style:
    """The style of a mode ("mode"), weight path ("weights") or attention path ("attention")."""
    if kind not in PINNED:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(PINNED)}")
    if name is None:
        return UNSTATED
    return PINNED[kind].get(name) or _derived(kind, name)


def mode_style(name) -> Style:
    return style_of("mode", name)


def weight_style(name) -> Style:
    return style_of("weights", name)


def attention_style(name) -> Style:
    return style_of("attention", name)


def names(kind: str) -> list[str]:
    """Every name of a kind that has a style for sure: the pinned ones, then the registry's others."""
    registered = {"mode": [*MODE_NAMES, *LAYER_ARMS], "weights": list(unit_names("weights")), "attention": list(unit_names("attention"))}[kind]
    return list(dict.fromkeys([*PINNED[kind], *registered]))


def ordered(kind: str, present) -> list[str]:
    """The names present, in the kind's canonical order (pinned first, then as they come)."""
    present = list(dict.fromkeys(present))
    canon = names(kind)
    return sorted(present, key=lambda n: (canon.index(n) if n in canon else len(canon), present.index(n)))


def gid(kind: str, name, role: str = "color") -> str:
    """The id a figure gives each artist that draws a category (tests read it back): "mode:eager"
    where the artist has the category's colour (and marker), "weights.marker:bf16" where another
    category has the colour and this one gives only the marker. Join several with "|"."""
    return f"{kind}:{name}" if role == "color" else f"{kind}.{role}:{name}"


def handle(st: Style, *, hollow: bool = False, line: bool = False, label=None, **kw) -> Line2D:
    """A legend entry for a style: its marker (filled or hollow), with its line if `line`."""
    return Line2D([], [], color=st.color, marker=st.marker, markersize=kw.pop("markersize", MARKER_SIZE * (1.4 if st.marker == "*" else 1)),
                  markerfacecolor=HOLLOW_FACE if hollow else st.color, markeredgecolor=st.color,
                  ls=st.linestyle if line else "none", lw=1.3, label=label, **kw)


def patch(color: str, label: str) -> Patch:
    return Patch(facecolor=color, edgecolor="none", label=label)


def cross_handle(label: str = "× beside a point: one machine or session, no interval") -> Line2D:
    return Line2D([], [], marker="x", color="black", ls="none", markersize=5, label=label)


def off_axis_handle(label: str = "interval runs off the axis (arrowhead at its edge)") -> Line2D:
    return Line2D([], [], marker="^", color="black", ls="none", markersize=4.5, label=label)


# ---------------------------------------------------------------------------------------------- text

def literal(s) -> str:
    """A user's string (display name, key, mode) as matplotlib text: drawn literally, never as math.
    matplotlib parses text with an even number of unescaped `$` as mathtext; escaped, it has none,
    and matplotlib turns each `\\$` back into `$`. Other backslashes are plain characters there."""
    return str(s).replace("$", r"\$")


def _width(ch: str) -> int:
    """Columns a character takes: 2 for East Asian wide ones and emoji, else 1."""
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") or ord(ch) >= 0x1F000 else 1


def _cut(s, n: int) -> str:
    """A user's string on one line, at most n columns (wide characters count twice), ellipsized."""
    s = " ".join(str(s).split())  # no newline or tab of a user's string reaches a label
    if sum(map(_width, s)) <= n:
        return s
    out, used = [], 1  # room for the ellipsis
    for ch in s:
        if used + _width(ch) > n:
            break
        out.append(ch)
        used += _width(ch)
    return "".join(out).rstrip() + "…"


def _cols(s: str) -> int:
    return sum(map(_width, s))


def short(s, n: int = LABEL_CHARS) -> str:
    """A user's string for a legend or a tick: literal, at most n characters (ellipsized)."""
    return literal(_cut(s, n))


def join(parts, width: int = TITLE_CHARS, sep: str = ", ") -> str:
    """Parts (display names, 'ctx 2048') as one literal label, wrapped between parts at `width`
    characters; a part longer than the width is ellipsized, never split."""
    lines: list[str] = []
    for part in (_cut(p, width) for p in parts if p is not None and str(p) != ""):
        if lines and _cols(lines[-1]) + len(sep) + _cols(part) <= width:
            lines[-1] += sep + part
        else:
            if lines:
                lines[-1] += sep.rstrip()
            lines.append(part)
    return literal("\n".join(lines))


def chars(width_in: float, fontsize: float = 8.5) -> int:
    """About how many columns (characters; wide ones count twice) of DejaVu Sans at `fontsize` fit
    in `width_in` inches: a title's wrap width for a panel that wide, never fewer than 24."""
    return max(24, int(width_in * 72 / (0.65 * fontsize)))


def display(table: dict, key, n: int | None = None) -> str:
    """A key's display name from a gpus / models table (the key itself if the table lacks it), raw."""
    name = (table.get(key) or {}).get("display_name") or key
    return str(name) if n is None else _cut(name, n)


# ---------------------------------------------------------------------------------------------- setup and files

def fallback_fonts() -> list[str]:
    """The FALLBACK_FONTS matplotlib can find. A font installed after matplotlib built its font
    cache is not in the cache: look for new font files once before giving up on one."""
    global _rescanned
    fm = matplotlib.font_manager.fontManager
    known = {f.name for f in fm.ttflist}
    if not _rescanned and not all(name in known for name in FALLBACK_FONTS):
        _rescanned = True
        cached = {f.fname for f in fm.ttflist}
        for path in matplotlib.font_manager.findSystemFonts():
            if path not in cached:
                try:
                    fm.addfont(path)
                except Exception:  # noqa: BLE001 - an unreadable font file is just not a fallback
                    pass
        known = {f.name for f in fm.ttflist}
    return [name for name in FALLBACK_FONTS if name in known]


def setup() -> None:
    """The rcParams of every figure: seaborn's whitegrid at paper scale, constrained layout, plain
    fonts with the glyph fallbacks, no mathtext in user strings (see `literal`)."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    plt.rcParams.update({
        "figure.dpi": DPI, "savefig.dpi": DPI, "savefig.bbox": "tight", "savefig.pad_inches": 0.04,
        "figure.constrained_layout.use": True, "pdf.fonttype": 42, "text.usetex": False,
        "font.family": ["sans-serif", *fallback_fonts()],
        "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
        "legend.fontsize": 7, "legend.title_fontsize": 7, "legend.frameon": False, "figure.titlesize": 9,
        "axes.formatter.useoffset": False, "axes.edgecolor": "0.7", "grid.color": "0.9",
        "lines.markeredgewidth": 0.8,
    })


def save(fig, outputs) -> None:
    for out in outputs:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        # No timestamps in the files: a rebuild from the same stats gives the same bytes.
        meta = {"CreationDate": None} if str(out).endswith(".pdf") else {"Software": None}
        fig.savefig(out, metadata=meta)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- panels and legends

def grid(n: int, ncols: int | None = None, panel: tuple[float, float] = PANEL, sharex: bool = False, sharey: bool = False,
         extra_h: float = 0.7):
    """A figure of n panels wrapped into rows (at most `ncols` a row: 1 to 3 by default), each about
    `panel` inches, shrunk so no side passes MAX_SIDE_IN; unused cells of the last row removed.
    Returns (fig, [axes...]) in reading order. extra_h: inches kept for a legend below."""
    n = max(1, n)
    ncols = max(1, min(n, ncols or (1 if n == 1 else 2 if n in (2, 4) else 3)))
    nrows = math.ceil(n / ncols)
    w, h = panel[0] * ncols, panel[1] * nrows + extra_h
    scale = min(1.0, MAX_SIDE_IN / w, MAX_SIDE_IN / h)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * scale, h * scale), squeeze=False, sharex=sharex, sharey=sharey,
                             layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        fig.delaxes(ax)
    # with shared axes, a panel whose neighbour below was removed still needs its tick labels
    if sharex:
        for i, ax in enumerate(flat[:n]):
            if i + ncols >= n:
                ax.xaxis.set_tick_params(labelbottom=True)
    fig._decodegap_ncols = ncols
    return fig, flat[:n]


def outer_labels(fig, axes, xlabel: str | None = None, ylabel: str | None = None) -> None:
    """Axis labels on the outer panels of a `grid`: x under each panel with none below it, y left
    of each row's first panel (not fig.supxlabel: that would share the bottom with the legend)."""
    ncols = getattr(fig, "_decodegap_ncols", 1)
    for i, ax in enumerate(axes):
        if xlabel and i + ncols >= len(axes):
            ax.set_xlabel(xlabel)
        if ylabel and i % ncols == 0:
            ax.set_ylabel(ylabel)


def legend_below(fig, handles, labels=None, ncol: int | None = None, title: str | None = None):
    """One legend for the whole figure, under its axes and inside its bounds (constrained layout
    makes room). Duplicate labels are dropped, first one kept."""
    if labels is None:
        labels = [h.get_label() for h in handles]
    uniq = {}
    for h, lab in zip(handles, labels):
        if lab and not lab.startswith("_") and lab not in uniq:
            uniq[lab] = h
    if not uniq:
        return None
    ncol = _legend_columns(list(uniq), fig.get_figwidth() * 72, ncol or 4)
    return fig.legend(list(uniq.values()), list(uniq), loc="outside lower center", ncol=ncol, title=title,
                      handlelength=1.8, columnspacing=1.2, borderaxespad=0.2)


def _legend_columns(labels: list[str], width_pt: float, most: int) -> int:
    """The most columns (up to `most`) whose estimated width fits the figure: matplotlib fills a
    legend column by column, each as wide as its longest label."""
    size = plt.rcParams["legend.fontsize"]
    size = size if isinstance(size, (int, float)) else 7
    entry = [0.55 * size * max(len(line) for line in lab.split("\n")) + 3.2 * size for lab in labels]
    for ncol in range(max(1, min(most, len(labels))), 0, -1):
        rows = math.ceil(len(labels) / ncol)
        cols = [max(entry[i:i + rows]) for i in range(0, len(labels), rows)]
        if sum(cols) + 1.2 * size * (len(cols) - 1) <= 0.97 * width_pt:
            return ncol
    return 1


def not_measured(ax, text: str = "not measured") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


# ---------------------------------------------------------------------------------------------- axes

def plain(v: float) -> str:
    """A tick value as a plain number: 0.5, 2, 20, 2000 (never 2x10^1)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else ""
    s = f"{v:.6g}"
    if "e" in s:
        digits = max(0, 5 - math.floor(math.log10(abs(v))))
        s = f"{v:.{digits}f}"
        s = s.rstrip("0").rstrip(".") if "." in s else s
    return s


class PlainLogLocator(matplotlib.ticker.Locator):
    """Log-axis ticks at 1, 2, 5 x 10^k (or decades, or 1-2-3-5, whatever gives 3 to max_ticks in
    view); a view narrower than that gets evenly spaced plain ticks."""

    SUBS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0))

    def __init__(self, max_ticks: int = 7):
        self.max_ticks = max_ticks

    def __call__(self):
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin, vmax):
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if vmax <= 0:
            return []
        vmin = vmin if vmin > 0 else vmax * 1e-3
        lo, hi = math.floor(math.log10(vmin)), math.ceil(math.log10(vmax))
        best: list[float] = []
        for subs in self.SUBS:
            ticks = [round(m * 10.0**e, 12 - e if e < 12 else 0) for e in range(lo, hi + 1) for m in subs]
            ticks = [t for t in ticks if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9)]
            if len(ticks) > self.max_ticks:
                if len(best) < 2:  # too many even so: thin them (every k-th decade)
                    best = ticks[:: math.ceil(len(ticks) / self.max_ticks)]
                break
            best = ticks
            if len(ticks) >= 3:
                break
        if len(best) < 2:  # a narrow view: plain linear steps inside it
            best = [t for t in matplotlib.ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)
                    if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9)]
        return best


def log_axis(ax, axis: str = "y", max_ticks: int = 7) -> None:
    """A log axis with plain-number ticks (2, 5, 10, 20, 50), no minor labels, no 10^x."""
    a = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a.set_major_locator(PlainLogLocator(max_ticks))
    a.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: plain(v)))
    a.set_minor_locator(matplotlib.ticker.NullLocator())
    a.set_minor_formatter(matplotlib.ticker.NullFormatter())


def fixed_log2_axis(ax, values, axis: str = "x", labels=None) -> None:
    """A base-2 log axis (context lengths) with ticks exactly at `values`, labelled plainly."""
    values = sorted(set(values))
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(matplotlib.ticker.FixedLocator(values))
    a.set_major_formatter(matplotlib.ticker.FixedFormatter(labels or [plain(v) for v in values]))
    a.set_minor_locator(matplotlib.ticker.NullLocator())


def span(centers, lows=(), highs=(), factor: float = 3.0, pad: float = 1.25) -> tuple[float, float]:
    """Log-axis limits from the medians: each interval end counts only up to `factor` from its
    median, so a huge interval runs off the axis (see `interval`) instead of squashing the data."""
    lo_ends, hi_ends = [], []
    for i, c in enumerate(centers):
        if c is None or not math.isfinite(c) or c <= 0:
            continue
        lo = lows[i] if i < len(lows) else None
        hi = highs[i] if i < len(highs) else None
        lo_ends.append(max(lo, c / factor) if lo is not None and math.isfinite(lo) and lo > 0 else c)
        hi_ends.append(min(hi, c * factor) if hi is not None and math.isfinite(hi) else c)
    if not lo_ends:
        return 1.0, 10.0
    return min(lo_ends) / pad, max(hi_ends) * pad


def interval(ax, pos: float, lo, hi, limits: tuple[float, float], color, vertical: bool = True, lw: float = 1.1,
             gid_: str | None = None) -> bool:
    """Draw an interval [lo, hi] at `pos` (x for a vertical one), cut at the axis limits: a cut end
    gets an arrowhead on the axis edge. Returns whether it was cut. Nothing for a missing bound."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    vmin, vmax = limits
    a, b = max(lo, vmin), min(hi, vmax)
    cut_lo, cut_hi = lo < vmin, hi > vmax
    style = {(False, False): "-", (False, True): "-|>", (True, False): "<|-", (True, True): "<|-|>"}[(cut_lo, cut_hi)]
    xy, xytext = ((pos, b), (pos, a)) if vertical else ((b, pos), (a, pos))
    ann = ax.annotate("", xy=xy, xytext=xytext, annotation_clip=False, zorder=2,
                      arrowprops=dict(arrowstyle=style, color=color, lw=lw, shrinkA=0, shrinkB=0, mutation_scale=7))
    if gid_:
        ann.arrow_patch.set_gid(gid_)
    return cut_lo or cut_hi


def area(st: Style, scale: float = 1.0) -> float:
    """A scatter marker's area in a style: a star is drawn larger, so that it looks as large."""
    return MARKER_AREA * scale * (2.0 if st.marker == "*" else 1.0)


def no_interval(ax, x, y) -> None:
    """Mark a point that has no interval (one machine or session): a small black cross at its upper
    right, beside the marker (never over it, so the marker keeps its colour)."""
    from matplotlib.transforms import offset_copy

    ax.scatter(x, y, transform=offset_copy(ax.transData, fig=ax.figure, x=6, y=5, units="points"), **NO_INTERVAL)


def hollow(st: Style) -> dict:
    """scatter() keywords of a published (hollow) point in a style's colour."""
    return dict(marker=st.marker, facecolors=HOLLOW_FACE, edgecolors=st.color, linewidths=1.3)


def filled(st: Style) -> dict:
    """scatter() keywords of a measured (filled) point."""
    return dict(marker=st.marker, color=st.color, edgecolors="white", linewidths=0.5)
