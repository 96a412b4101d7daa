"""LaTeX tables (booktabs, via jinja2) from per-cell statistics. Each table writes its .tex and a
sidecar JSON of every number it rendered (key -> value, cell, stats file) for the provenance stage.

The tables live in three modules, all re-exported here (`from decodegap.analysis.tables import
matrix_table` keeps working): tables_paper (the paper's own: matrix, A/B, floors, published, cost),
tables_experiments (attention, weight paths, the floor experiment), tables_gap (where the fused
step's time goes), tables_engines (engines at batch 1), tables_beyond (anatomy, host,
step model, environment, sensitivity, variance); what they share, and the layout that keeps each
table on its page, is tables_common. This module gathers them into report/paper_tables.tex.
"""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from decodegap.analysis.latex import environment
from decodegap.analysis.latex import path as latex_path
from decodegap.analysis.tables_beyond import (  # noqa: F401
    ANATOMY_NUMBERS, anatomy_table, environment_table, host_table, model_table, sensitivity_table, step_model_numbers, variance_table,
)
from decodegap.analysis.tables_common import (  # noqa: F401
    NOT_MEASURED, SCOPE_LABEL, SCOPES, _cannot_run, _cell_id, _ci_text, _family_of, _marks, _no_result, _Notes, _pct, _reason_of, _write,
    load_stats,
)
from decodegap.analysis.tables_engines import engines_table  # noqa: F401
from decodegap.analysis.tables_gap import gap_table  # noqa: F401
from decodegap.analysis.tables_experiments import (  # noqa: F401
    BEYOND_ARMS, attention_step_table, attention_table, floor_table, over_bf16_graphed, quant_numbers, quantization_table,
)
from decodegap.analysis.tables_paper import (  # noqa: F401
    QUANTITY_LABEL, ab_table, cost_table, floors_table, matrix_table, not_reproduced_reason, published_table,
)


def paper_tables(table_files, figures: list[dict], out_tex) -> None:
    """report/paper_tables.tex: \\input of every table, then every figure; paths relative to report/."""
    from decodegap.analysis.latex import PREAMBLE_MACROS

    def rel(p):  # paths relative to report/, where the including document is compiled
        p = Path(p)
        return latex_path(p.relative_to("report").as_posix() if p.parts[0] == "report" else p.as_posix())

    tables = [rel(t) for t in table_files]
    figs = [{**f, "path": rel(f["path"])} for f in figures]
    tex = environment().get_template("paper_tables.tex.j2").render(macros=Markup(PREAMBLE_MACROS), tables=tables, figures=figs)
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)
