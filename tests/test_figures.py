"""The report's figures as a reader sees them, drawn from small fixture statistics (no report build):
a sane size and aspect, legends inside the figure and off the data, one colour and marker per mode,
weight path and attention path in every figure, display names (never keys) in titles, plain log
ticks, huge intervals cut at the axis with a note, and long names that never grow a figure."""

import json
import math

import numpy as np
import pytest
from matplotlib.collections import Collection
from matplotlib.colors import to_hex, to_rgba
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle
from matplotlib.patches import FancyArrowPatch, Patch
from matplotlib.text import Text
from PIL import Image

from decodegap.analysis import figures
from decodegap.analysis import style as S
from decodegap.analysis.reference import load_reference
from decodegap.core.config import load_gpus

FIGURES = ("ladder", "context", "ab", "host", "anatomy", "deployment", "attention", "quantization", "engines")
MAX_SIDE_PX = 3000
WHITE = "#ffffff"


# ---------------------------------------------------------------------------------------------- fixtures

def _cells():
    q = dict(model="qwen2.5-7b", attn="sdpa", quant="bf16")
    cells = {"matrix": [], "ab": [], "floor": [], "layer": [], "quant": [], "engines": []}
    for ctx in (2048, 4096):
        for mode in ("eager", "static", "graphed"):
            cells["matrix"].append(dict(gpu="h200", ctx=ctx, mode=mode, **q))
    cells["matrix"].append(dict(gpu="l4", ctx=2048, mode="graphed", **q))  # one session: no interval
    cells["ab"] = [dict(gpu="h200", ctx=2048, mode=m, **q) for m in ("ab-eager-graphed", "ab-static-graphed")]
    cells["floor"] = [dict(gpu="h200", ctx=2048, mode="ab-graphed-fused", **q)]
    cells["layer"] = [dict(gpu="h200", model="qwen2.5-7b", ctx=c, attn=a, quant="bf16", mode="layer")
                      for a in ("sdpa", "sdpa-flash") for c in (2048, 4096)]
    cells["quant"] = [dict(gpu="h200", ctx=2048, mode="ab-static-graphed", **{**q, "quant": "int4-tinygemm"})]
    cells["engines"] = [dict(gpu="h200", ctx=2048, mode="generate", **q)]
    return cells


FAST_STATS = {"n_resamples": 100, "stability_limits": (0.10,), "host_nominal_factors": (1.25,)}  # the figures read no sensitivity


def _cell_stats(root, cell, records):
    """A cell's fixture sessions summarized as the workflow does (conftest.fixture_cell_stats, with
    fewer resamples: these tests look at figures, not at intervals)."""
    from decodegap.analysis import stats
    from decodegap.core import manifest, paths
    from decodegap.core.record import write_session

    raw = []
    for s, rec in enumerate(records):
        path = paths.session_path(root=root, session=s, **cell)
        write_session(rec, path)
        raw.append(path)
    manifest.add(raw, root)  # the analysis reads only the bytes the manifest lists
    out = root / "stats" / paths.CELL.format(**cell)
    protocol = dict(records[0]["protocol"])  # judged by the protocol the fixtures were made with
    stats.summarize_cell(raw, cell, vars(load_gpus()[cell["gpu"]]), FAST_STATS, out / "s.parquet", out / "t.parquet", out / "stats.json",
                         protocol)
    return out / "stats.json"


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """Statistics of a few cells of every kind a figure draws."""
    from conftest import fixture_models

    from decodegap.analysis import synthetic
    from decodegap.core.config import load_models

    root = tmp_path_factory.mktemp("figures")
    w_bf16 = load_models()["qwen2.5-7b"].param_count() * 2
    files = {}
    for group, cells in _cells().items():
        files[group] = []
        for i, cell in enumerate(cells):
            n = 1 if cell["gpu"] == "l4" else 3  # sessions on machines synthetic-0..2
            base = 6.0 + cell["ctx"] / 1024 if cell["mode"] != "layer" else 0.5
            weight = w_bf16 // 3 if cell["quant"] != "bf16" else None
            records = [synthetic.record(cell, s, 32, np.random.default_rng([s, i, len(group)]), base_ms=base * (0.8 if weight else 1),
                                        weight_bytes=weight) for s in range(n)]
            files[group].append(_cell_stats(root, cell, records))
    gpus = {k: vars(v) for k, v in load_gpus().items()}
    return {"root": root, "files": files, "gpus": gpus, "models": fixture_models(), "reference": load_reference()}


def calls(ws, gpus=None, models=None):
    """Each figure function as the workflow calls it (scripts/rules/figure.py), on the fixture."""
    f, ref = ws["files"], ws["reference"]
    gpus, models = gpus or ws["gpus"], models or ws["models"]
    return {
        "ladder": lambda o: figures.ladder(f["matrix"] + f["floor"], ref, gpus, "qwen2.5-7b", 2048, o),
        "context": lambda o: figures.context(f["matrix"], gpus, models, o),
        "ab": lambda o: figures.ab(f["ab"], ref, gpus, models, o),
        "host": lambda o: figures.host(f["ab"], gpus, models, o),
        "anatomy": lambda o: figures.anatomy(f["matrix"] + f["ab"] + f["floor"], gpus, models, o),
        "deployment": lambda o: figures.deployment(f["matrix"] + f["ab"], ref, gpus, o),
        "attention": lambda o: figures.attention(f["layer"], ref, gpus, models, o),
        "quantization": lambda o: figures.quantization(f["ab"] + f["quant"], gpus, models, o),
        # the engines' generate cell beside the floor arms of the same cell, and a planned cell with no session
        "engines": lambda o: figures.engines(f["floor"] + f["engines"], _cells()["floor"] + _cells()["engines"]
                                             + [dict(gpu="h200", model="qwen2.5-7b", ctx=4096, attn="sdpa", quant="bf16", mode="generate")],
                                             gpus, models, o),
    }


class Drawn:
    """What one figure function drew: the figure (drawn, before saving) and its files."""

    def __init__(self, fig, outputs):
        self.fig, self.outputs = fig, outputs
        fig.canvas.draw()
        self.renderer = fig.canvas.get_renderer()

    def png_size(self):
        return Image.open(self.outputs[-1]).size

    def texts(self):
        return [t for t in self.fig.findobj(Text) if t.get_visible() and t.get_text()]

    def legends(self):
        return [*self.fig.legends, *(ax.get_legend() for ax in self.fig.axes if ax.get_legend())]

    def legend_labels(self):
        return [t.get_text() for lg in self.legends() for t in lg.get_texts()]

    def tagged(self, role: str = "color"):
        """(kind, name, artist) for every artist the figure tagged with a category (style.gid): the
        category its colour shows (role "color") or, where another one has the colour, its marker
        (role "marker": style.gid(kind, name, "marker"))."""
        out = []
        arrows = [t.arrow_patch for ax in self.fig.axes for t in ax.texts if getattr(t, "arrow_patch", None)]
        for a in [*self.fig.findobj(lambda a: bool(getattr(a, "get_gid", lambda: None)())), *(p for p in arrows if p.get_gid())]:
            for tag in a.get_gid().split("|"):
                kind, _, name = tag.partition(":")
                kind, _, r = kind.partition(".")
                if kind in S.PINNED and (r or "color") == role:
                    out.append((kind, None if name == "None" else name, a))
        return out


def draw(monkeypatch, tmp_path, name, call, pdf: bool = False) -> Drawn:
    kept = []
    save = figures.save

    def keep(fig, outputs):
        kept.append(Drawn(fig, outputs))
        save(fig, outputs)

    monkeypatch.setattr(figures, "save", keep)
    call(([tmp_path / f"{name}.pdf"] if pdf else []) + [tmp_path / f"{name}.png"])
    assert len(kept) == 1, f"{name} saved {len(kept)} figures"
    return kept[0]


@pytest.fixture(scope="module")
def drawn(ws, tmp_path_factory):
    """Every figure drawn once from the fixture."""
    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("drawn")
    try:
        return {name: draw(mp, out, name, call, pdf=True) for name, call in calls(ws).items()}
    finally:
        mp.undo()


def _colors(a) -> set[str]:
    """The visible colours of an artist (lines, markers, collections, patches), as hex."""
    if isinstance(a, Line2D):
        cols = [a.get_color(), a.get_markerfacecolor(), a.get_markeredgecolor()]
    elif isinstance(a, Collection):
        cols = [*a.get_facecolors(), *a.get_edgecolors()]
    elif isinstance(a, (Patch, FancyArrowPatch)):
        cols = [a.get_facecolor(), a.get_edgecolor()]
    else:
        return set()
    out = set()
    for c in cols:
        if isinstance(c, str) and c == "none":
            continue
        rgba = np.asarray(to_rgba(c))
        if rgba[3] > 0:
            out.add(to_hex(rgba[:3]))
    return out


def _marker_vertices(marker):
    m = MarkerStyle(marker)
    return m.get_path().transformed(m.get_transform()).vertices


# ---------------------------------------------------------------------------------------------- size, layout

@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_has_a_sane_size_and_aspect(drawn, name):
    d = drawn[name]
    assert all(p.stat().st_size > 1000 for p in d.outputs)
    w, h = d.png_size()
    assert max(w, h) <= MAX_SIDE_PX, (name, w, h)
    assert 1 / 3 <= w / h <= 3, f"{name} is a {w}x{h} strip"
    assert min(w, h) >= 400, (name, w, h)


@pytest.mark.parametrize("name", FIGURES)
def test_legends_lie_inside_the_figure_and_off_the_data(drawn, name):
    d = drawn[name]
    fig_box = d.fig.bbox
    assert d.legends(), f"{name} has no legend"
    for lg in d.legends():
        box = lg.get_window_extent(d.renderer)
        assert box.x0 >= fig_box.x0 - 1 and box.y0 >= fig_box.y0 - 1 and box.x1 <= fig_box.x1 + 1 and box.y1 <= fig_box.y1 + 1, \
            f"{name}: legend {box} sticks out of the figure {fig_box}"
        for ax in d.fig.axes:
            assert not box.overlaps(ax.bbox), f"{name}: the legend covers the data area of {ax.get_title()!r}"


@pytest.mark.parametrize("name", FIGURES)
def test_nothing_is_cut_off_at_the_edges(drawn, name):
    """Every panel with all it draws (ticks, labels, title), every legend and figure text inside the
    figure: saving with a tight box then never crops."""
    d = drawn[name]
    fig_box = d.fig.bbox

    def inside(box):
        return box.x0 >= fig_box.x0 - 2 and box.x1 <= fig_box.x1 + 2 and box.y0 >= fig_box.y0 - 2 and box.y1 <= fig_box.y1 + 2

    for ax in d.fig.axes:
        assert inside(ax.get_tightbbox(d.renderer)), f"{name}: the panel {ax.get_title()!r} runs off the figure"
    for t in d.fig.texts:
        assert inside(t.get_window_extent(d.renderer)), f"{name}: {t.get_text()!r} runs off the figure"


@pytest.mark.parametrize("name", FIGURES)
def test_log_axes_have_plain_number_ticks(drawn, name):
    d = drawn[name]
    for ax in d.fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(axis.get_view_interval())
            labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
            shown = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
            assert len(shown) >= 2, f"{name}: fewer than two ticks on a log axis"
            for label in labels:
                assert "$" not in label and "^" not in label and "e+" not in label and "e-" not in label, f"{name}: tick {label!r}"
            assert not [t for t in axis.get_minorticklabels() if t.get_text()], f"{name}: labelled minor ticks"


# ---------------------------------------------------------------------------------------------- one style

def test_every_mode_and_path_has_its_own_style():
    from decodegap.core.cells import LAYER_ARMS, MODE_NAMES
    from decodegap.core.registry import unit_names

    for kind, names in (("mode", [*MODE_NAMES, *LAYER_ARMS]), ("weights", list(dict.fromkeys([*unit_names("weights"), "fp8", "int4-triton"]))),
                        ("attention", list(unit_names("attention")))):
        styles = {n: S.style_of(kind, n) for n in names}
        assert len({s.color for s in styles.values()}) == len(names), f"two {kind} share a colour: {styles}"
        assert len({s.marker for s in styles.values()}) == len(names), f"two {kind} share a marker: {styles}"
        assert set(names) <= set(S.names(kind))
    # a path nobody pinned (a new unit file) gets a style from its name alone: stable, off the pinned colours
    new = S.weight_style("int3-newkernel")
    assert new == S.weight_style("int3-newkernel")
    assert new.color not in {s.color for kind in S.PINNED.values() for s in kind.values()}


def test_a_category_has_one_colour_in_every_figure(drawn):
    seen: dict[tuple, set] = {}
    for name, d in drawn.items():
        for kind, cat, artist in d.tagged():
            st = S.style_of(kind, cat)
            colors = _colors(artist)
            if not colors:
                continue
            assert st.color.lower() in colors, f"{name}: {kind} {cat} drawn in {colors}, its colour is {st.color}"
            assert colors <= {st.color.lower(), WHITE}, f"{name}: {kind} {cat} mixes colours {colors}"
            seen.setdefault((kind, cat), set()).add(name)
    # the modes appear in several figures, each time in their colour (checked above)
    assert {"ladder", "context", "host", "ab", "deployment", "anatomy"} <= set().union(*(v for (k, _), v in seen.items() if k == "mode"))
    assert seen[("mode", "graphed")] >= {"ladder", "context", "host", "anatomy", "deployment"}
    assert seen[("mode", "eager")] >= {"ladder", "context", "host", "ab", "deployment"}
    assert ("weights", "int4-tinygemm") in seen and ("attention", "sdpa-flash") in seen


LEGEND_KIND = {"ladder": "mode", "context": "mode", "ab": "mode", "host": "mode", "anatomy": "mode", "deployment": "mode",
               "attention": "attention", "quantization": "weights", "engines": "mode"}


@pytest.mark.parametrize("name", FIGURES)
def test_legend_entries_carry_the_category_colour(drawn, name):
    kind = LEGEND_KIND[name]
    by_label = {}
    for st in S.PINNED[kind].values():
        by_label.setdefault(st.label, st)
    checked = 0
    for lg in drawn[name].legends():
        for h, t in zip(lg.legend_handles, lg.get_texts()):
            label = t.get_text().removeprefix("measured, over ").removesuffix(", measured").removesuffix(", published").removesuffix(" step")
            if label in by_label:
                assert by_label[label].color.lower() in _colors(h), f"{name}: legend {label!r} in {_colors(h)}"
                checked += 1
    assert checked, f"{name}: no legend entry names a {kind}"


def test_deployment_gives_each_weight_path_its_own_marker(drawn):
    """The paper's L4 points (four weight paths, mode unstated) were four identical hollow squares."""
    markers = {}
    for kind, cat, artist in drawn["deployment"].tagged("marker"):
        if kind == "weights":
            markers.setdefault(cat, []).append(artist.get_paths()[0].vertices)
    assert {"bf16", "bnb-nf4", "awq-marlin", "gptq-exllamav2"} <= set(markers)
    for cat, paths in markers.items():
        for v in paths:
            assert np.allclose(v, _marker_vertices(S.weight_style(cat).marker)), cat
    shapes = {cat: _marker_vertices(S.weight_style(cat).marker).tobytes() for cat in markers}
    assert len(set(shapes.values())) == len(shapes)
    legend = drawn["deployment"].legend_labels()
    assert {"bf16", "bnb-nf4", "awq-marlin", "gptq-exllamav2"} <= set(legend)


def test_ladder_points_are_opaque_and_off_the_legend(drawn):
    d = drawn["ladder"]
    points = [a for kind, cat, a in d.tagged() if kind == "mode"]
    assert {cat for kind, cat, _ in d.tagged()} >= {"eager", "static", "graphed", "fused"}
    for a in points:
        assert a.get_alpha() in (None, 1.0), "a faded point"
    (ax,) = d.fig.axes
    for lg in d.legends():
        assert not lg.get_window_extent(d.renderer).overlaps(ax.bbox)


# ---------------------------------------------------------------------------------------------- names

def test_titles_use_display_names_never_keys(drawn, ws):
    assert drawn["ladder"].fig.axes[0].get_title() == "Qwen-2.5-7B, ctx 2048, batch 1"
    for name, d in drawn.items():
        text = "\n".join(t.get_text() for t in d.texts())
        for key in ("qwen2.5-7b", "h200", "l4"):
            assert key not in text, f"{name} shows the key {key!r}"
    for name in ("context", "host", "attention", "anatomy"):
        titles = " ".join(ax.get_title() for ax in drawn[name].fig.axes)
        assert "H200 SXM" in titles, (name, titles)
    assert "Qwen-2.5-7B" in " ".join(ax.get_title() for ax in drawn["context"].fig.axes)


def test_long_names_are_ellipsized_and_never_grow_a_figure(ws, tmp_path, monkeypatch):
    long_gpu = "🚀 " + "Very-Long-GPU-Name " * 20
    long_model = "中文模型 " + "an extremely long model display name with $math$ & 100% " * 6
    gpus = {k: {**v, "display_name": long_gpu + k} for k, v in ws["gpus"].items()}
    models = {k: {**v, "display_name": long_model + k} for k, v in ws["models"].items()}
    for name, call in calls(ws, gpus, models).items():
        d = draw(monkeypatch, tmp_path, name, call)
        w, h = d.png_size()
        assert max(w, h) <= MAX_SIDE_PX and 1 / 3 <= w / h <= 3, (name, w, h)
        assert all(len(line) <= 130 for t in d.texts() for line in t.get_text().split("\n")), name
        assert any("…" in t.get_text() for t in d.texts()), f"{name}: a long name is not ellipsized"


def test_many_panels_wrap_into_rows(tmp_path, monkeypatch):
    """Fifteen GPU x model panels of the context figure: rows of three, not a strip."""
    from test_display_names import _cell, _stats

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    models = {m: {"display_name": m.upper()} for m in ("qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b")}
    files = []
    for g in ("h200", "h100-sxm5", "a100-80gb-sxm4", "l40s", "l4"):
        for m in models:
            for ctx in (2048, 4096):
                cell = _cell(g, m, ctx, "graphed")
                p = tmp_path / "stats" / g / m / str(ctx) / "stats.json"
                p.parent.mkdir(parents=True)
                p.write_text(json.dumps(_stats(cell, gpus, 8.0 * ctx / 2048)))
                files.append(p)
    d = draw(monkeypatch, tmp_path, "context", lambda o: figures.context(files, gpus, models, o))
    assert len(d.fig.axes) == 15
    w, h = d.png_size()
    assert max(w, h) <= MAX_SIDE_PX and 1 / 3 <= w / h <= 3, (w, h)
    cols = {round(ax.get_position().x0, 3) for ax in d.fig.axes}
    assert len(cols) == 3


def test_many_host_cells_wrap_into_rows(tmp_path, monkeypatch):
    """Four A/B cells with the host probe were a 2546x512 strip: now two rows of two."""
    from test_display_names import _cell, _stats

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    models = {m: {"display_name": m.upper()} for m in ("qwen2.5-7b", "mistral-7b-v0.3", "llama-3.1-8b")}
    files = []
    for i, (m, mode) in enumerate([("qwen2.5-7b", "ab-eager-graphed"), ("qwen2.5-7b", "ab-static-graphed"),
                                   ("mistral-7b-v0.3", "ab-static-graphed"), ("llama-3.1-8b", "ab-static-graphed")]):
        s = _stats(_cell("h200", m, 2048, "ab-eager-graphed"), gpus, 9.0)
        s["cell"]["mode"], s["arms"] = mode, mode[3:].split("-")
        for b in s["host_blocks"]:
            b["arm"] = s["arms"][b["block"] % 2]
        p = tmp_path / f"{i}.json"
        p.write_text(json.dumps(s))
        files.append(p)
    d = draw(monkeypatch, tmp_path, "host", lambda o: figures.host(files, gpus, models, o))
    w, h = d.png_size()
    assert len(d.fig.axes) == 4 and max(w, h) <= MAX_SIDE_PX and 1 / 3 <= w / h <= 3, (w, h)
    assert len({round(ax.get_position().y0, 3) for ax in d.fig.axes}) == 2
    # one colour per arm in every panel, the same as the other figures'
    for kind, cat, a in d.tagged():
        assert S.mode_style(cat).color.lower() in _colors(a)
    assert {cat for _, cat, _ in d.tagged()} == {"eager", "static", "graphed"}


def test_every_figure_draws_display_names_as_typed(ws, tmp_path, monkeypatch, caplog):
    """The names of tests/test_display_names.py ($, backslashes, LaTeX specials, accents, CJK, emoji)
    in the four figures that test does not draw: verbatim, never as mathtext, no missing glyph."""
    import logging
    import warnings

    from test_display_names import GPU_NAMES, MODEL_NAMES, require_glyph_fonts

    require_glyph_fonts()
    gpus = {k: {**v, "display_name": GPU_NAMES.get(k, v["display_name"])} for k, v in ws["gpus"].items()}
    models = {k: {**v, "display_name": MODEL_NAMES.get(k, v["display_name"])} for k, v in ws["models"].items()}
    for name, call in calls(ws, gpus, models).items():
        if name in ("ladder", "context", "ab", "host"):
            continue  # tests/test_display_names.py draws these with the same names
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="matplotlib"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            d = draw(monkeypatch, tmp_path, name, call)
        warned = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
        assert not [w for w in warned if "Glyph" in w or "missing from font" in w or "findfont" in w or "math" in w.lower()], (name, warned)
        drawn_texts = [t._preprocess_math(t.get_text()) for t in d.texts()]
        expected = [GPU_NAMES["h200"]] + ([MODEL_NAMES["qwen2.5-7b"]] if name not in ("ladder", "deployment") else [])
        for display in expected:
            hits = [is_math for s, is_math in drawn_texts if display in s]
            assert hits and not any(hits), f"{display!r} not drawn as typed in {name}: {drawn_texts}"


# ---------------------------------------------------------------------------------------------- intervals

def test_context_cuts_a_huge_interval_at_the_axis_and_says_so(ws, tmp_path, monkeypatch):
    """Two machines give a t interval of one degree of freedom (0.3 to 1748 ms around 24 ms in the
    bundled data): it must not set the axis. It runs off it with an arrowhead, and the legend says so."""
    files = []
    for f in ws["files"]["matrix"]:
        s = json.loads(f.read_text())
        if s["cell"]["mode"] == "static" and s["cell"]["ctx"] == 2048:
            a = s["completed"]["arms"]["static"]
            a["ci_low_ms"], a["ci_high_ms"] = a["median_ms"] / 70, a["median_ms"] * 70
            f = tmp_path / "static.json"
            f.write_text(json.dumps(s))
        files.append(f)
    d = draw(monkeypatch, tmp_path, "context", lambda o: figures.context(files, ws["gpus"], ws["models"], o))
    medians = [json.loads(f.read_text())["completed"]["arms"] for f in files]
    top = max(a["median_ms"] for arms in medians for a in arms.values())
    (ax,) = [ax for ax in d.fig.axes if ax.get_title().startswith("H200 SXM")]
    lo, hi = ax.get_ylim()
    assert hi < 10 * top, f"the axis runs to {hi} ms for medians up to {top} ms"
    arrows = [t.arrow_patch for t in ax.texts if getattr(t, "arrow_patch", None)]
    assert len(arrows) >= 4, "each interval is drawn"
    heads = [a for a in arrows if type(a.get_arrowstyle()).__name__.startswith("CurveFilled")]
    assert len(heads) == 1, "the cut interval ends in an arrowhead, no other does"
    assert any("runs off the axis" in t for t in d.legend_labels())
    # the one-session L4 cell has no interval: a cross beside it, and the legend says what it means
    assert any("no interval" in t for t in d.legend_labels())


def test_plain_log_ticks():
    loc = S.PlainLogLocator()
    assert [S.plain(v) for v in loc.tick_values(5, 206)] == ["5", "10", "20", "50", "100", "200"]
    assert [S.plain(v) for v in loc.tick_values(0.3, 2000)] == ["1", "10", "100", "1000"]
    assert len(loc.tick_values(8.0, 8.4)) >= 2  # a narrow view still gets ticks
    assert S.plain(0.002) == "0.002" and S.plain(20000.0) == "20000" and S.plain(2.5) == "2.5"
    assert math.isclose(S.span([10.0], [0.01], [1e6])[1], 10.0 * 3 * 1.25)  # the axis follows the median, not the interval



@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_draws_without_statistics(ws, tmp_path, monkeypatch, name):
    """No cell measured yet: the figure still draws (published points, or 'not measured'), sanely sized."""
    empty = {k: [] for k in ws["files"]}
    d = draw(monkeypatch, tmp_path, name, calls({**ws, "files": empty})[name])
    w, h = d.png_size()
    assert max(w, h) <= MAX_SIDE_PX and 1 / 3 <= w / h <= 3, (name, w, h)


def test_engines_sets_each_engine_against_the_floor_and_names_the_unmeasured(drawn):
    d = drawn["engines"]
    assert {cat for _, cat, _ in d.tagged()} == {"graphed", "fused", "generate"}
    ticks = [t.get_text() for ax in d.fig.axes for t in ax.get_yticklabels()]
    assert ticks.count("generate") == 2 and ticks.count("graphed") == 1  # the 4096 panel holds only the planned generate row
    assert sum(t.get_text() == "not measured" for t in d.texts()) == 1
    assert any("memory floor" in label for label in d.legend_labels())
