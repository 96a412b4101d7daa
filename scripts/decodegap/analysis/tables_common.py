"""What every table shares: loading statistics, cell ids, footnote marks, reasons, writing a table,
and the layout rules that keep a table on its page.

Layout (the templates' `_float.tex.j2` draws it): a table is one or more floats ("pages"); no table
is shrunk with \\resizebox. Rows come in groups (a title row, then its rows); `paginate` fills each
float with whole groups up to a budget of lines (the first float holds the caption as well), splits
a group longer than a float with its title repeated, and `place_notes` keeps a table's notes under
it while they fit the room left, else gives them floats of their own right after it (floats of one
kind keep their order). The budgets are set for the narrowest page the tables are \\input on: a
plain `article` (345 pt by 550 pt of text, \\footnotesize rows of 9.5 pt); a wide table is set on
its side (a float page turned by 90 degrees: 36 lines of 528 pt).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog
from decodegap.core.cells import NEWEST_CODE, OWN_KERNELS

NOT_MEASURED = "not measured"
SCOPES = ("completed", "valid", "host_nominal")  # stats.py's scopes, in the order the tables list them
SCOPE_LABEL = {"completed": "completed", "valid": "stability rule", "host_nominal": "host-nominal"}

# Lines of \footnotesize text per float, and characters per line of a note, on a plain article's page.
PORTRAIT_LINES, LANDSCAPE_LINES = 54, 32
PORTRAIT_CHARS, LANDSCAPE_CHARS = 78, 120
TITLE_LINES = 1.5  # a group's title row and the \midrule above it

# The mark of an interval of ms/step whose lower end lies below the cell's memory floor.
BELOW_FLOOR_MARK = Markup(r"\textsuperscript{$\ddagger$}")
BELOW_FLOOR_NOTE = Markup(
    r"$\ddagger$: the interval's lower end lies below the cell's physical memory floor $t_\mathrm{floor}$ (its weights "
    r"and KV read once at the datasheet bandwidth): it reflects the few machines behind the cell (Student-t with as many "
    r"degrees of freedom as machines less one, one for two machines), not a possible step time.")
FEW_SESSIONS_NOTE = Markup(r"$\dagger$: rests on one completed session, so it has no interval.")


def load_stats(files) -> list[dict]:
    out = []
    for f in files:
        with open(f) as fh:
            s = json.load(fh)
        s["_file"] = Path(f).as_posix()
        out.append(s)
    return out


def _cell_id(cell: dict) -> str:
    return f"{cell['gpu']}/{cell['model']}/ctx{cell['ctx']}/{cell['attn']}_{cell['quant']}_{cell['mode']}"


def _marks():
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while True:
        yield letters[i % 26] * (1 + i // 26)
        i += 1


class _Notes:
    """Footnotes of a table, one mark per distinct text: thirty cells ruled out for one reason share one note."""

    def __init__(self):
        self.notes, self._marks, self._by_text = [], _marks(), {}

    def mark(self, text: str) -> str:
        if text not in self._by_text:
            self._by_text[text] = next(self._marks)
            self.notes.append({"mark": self._by_text[text], "text": text})
        return self._by_text[text]


def _cannot_run(reasons) -> bool:
    """Every session of the cell found the path cannot run here (ruled out by the environment stage, or
    not possible when the session tried), rather than a session that failed or was too short."""
    return all(r.startswith(("ruled out", "not possible")) for r in reasons)


def _no_result(notes: _Notes, path: str, reasons) -> Markup:
    """What a cell (or a row of cells) without a number shows: "cannot run" when every reason says
    the path cannot run here, else "failed", with one footnote per distinct reason."""
    reasons = list(dict.fromkeys(reasons))
    word = "cannot run" if _cannot_run(reasons) else "failed"
    return Markup(rf"{word}\textsuperscript{{{notes.mark(f'{path}: ' + '; '.join(reasons))}}}")


def _reason_of(s: dict) -> str:
    """Why a cell has no completed session: its sessions' reasons, each said once."""
    reasons = [re.sub(r"^s\d+: ", "", r) for r in s.get("invalid_reasons", [])]
    return "; ".join(dict.fromkeys(reasons)) or "no completed session"


def _family_of(a: dict | None) -> str:
    """The attention kernel family an arm's profiled steps ran (the dispatcher's choice, for sdpa)."""
    fams = list((a or {}).get("attention_kernels") or {})
    return "/".join(fams) if fams else "--"


def _write(tex: str, out_tex, log: NumberLog, out_numbers) -> None:
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)
    Path(out_numbers).parent.mkdir(parents=True, exist_ok=True)
    Path(out_numbers).write_text(json.dumps(log.entries, indent=1, sort_keys=True) + "\n")


def _ci_text(log, quantity: str, cid: str, ci, meta, digits: int = 3) -> Markup | str:
    """'[low, high]' for an interval; '--' without one."""
    if not ci:
        return "--"
    scope = meta["scope"]
    lo = log.num(f"{quantity}_low/{cid}/{scope}", ci[0], digits, quantity=f"{quantity}_low", **meta)
    hi = log.num(f"{quantity}_high/{cid}/{scope}", ci[1], digits, quantity=f"{quantity}_high", **meta)
    return Markup(f"[{lo}, {hi}]")


def _pct(x):
    return None if x is None else 100.0 * x


def below_floor(low_ms: float | None, arm: dict | None) -> bool:
    """An interval of ms/step whose lower end lies below the arm's analytic memory floor (t_floor_ms)."""
    floor = (arm or {}).get("t_floor_ms")
    return low_ms is not None and floor is not None and low_ms < floor


def measured_gpus(stats: list[dict]) -> set[str]:
    """GPU keys with at least one session in the statistics read (any status but "not measured")."""
    return {s["cell"]["gpu"] for s in stats if s.get("n_sessions", 0) > 0 or s.get("status") not in (None, NOT_MEASURED)}


def no_session_reason(gpu_display: str, cells: str) -> str:
    """Why a GPU has no number here: none of the cells this artifact reads (`cells`, e.g. "matrix or A/B")
    has a session of it. Said of those cells only: the GPU may have sessions of others (the fused step's)."""
    return f"{NOT_MEASURED}: no {gpu_display} session in the {cells} cells"


def text_lines(text: str, chars: int = PORTRAIT_CHARS) -> int:
    """Lines a text takes when set in a float's width (LaTeX markup counted as printed, roughly)."""
    printed = re.sub(r"\\dgnum\{[^}]*\}", "", str(text))
    printed = re.sub(r"\\[a-zA-Z]+(\{\})?", "", printed)
    return max(1, math.ceil(len(printed) / chars))


def _row_lines(rows) -> float:
    return sum(r.get("lines", 1) if isinstance(r, dict) else 1 for r in rows)


def _group_lines(g: dict) -> float:
    return (TITLE_LINES if g.get("title") else 0) + _row_lines(g["rows"])


def paginate(groups: list[dict], first: float, rest: float) -> list[list[dict]]:
    """Groups ({"title": ..., "rows": [...]}; a row costs row.get("lines", 1) lines, a title
    TITLE_LINES) onto floats of at most `first` lines (the first float) and `rest` lines (each
    after it). A group that does not fit the room left starts a float, as does one with "break"
    set; a group longer than a float is split, its title repeated with continued=True. Returns the
    floats, each a list of the groups' parts ({**group, "rows", "continued"}); at least one float."""
    pages, page, room = [], [], first
    for g in groups:
        rows, continued = list(g["rows"]), False
        title = TITLE_LINES if g.get("title") else 0
        while True:
            whole = title + _row_lines(rows)
            # a group that asks for a float of its own, or does not fit what is left (kept whole where a float can hold it)
            if page and ((g.get("break") and not continued) or title + _row_lines(rows[:1]) > room or room < whole <= rest):
                pages.append(page)
                page, room = [], rest
            take, used = [], title
            for r in rows:
                if take and used + _row_lines([r]) > room:
                    break
                take.append(r)
                used += _row_lines([r])
            page.append({**g, "rows": take, "continued": continued})
            room -= used
            rows = rows[len(take):]
            if not rows:
                break
            pages.append(page)
            page, room, continued = [], rest, True
    if page or not pages:
        pages.append(page)
    return pages


def room_left(pages: list[list[dict]], first: float, rest: float) -> float:
    """Lines left on the last float that `paginate` filled."""
    return (first if len(pages) == 1 else rest) - sum(_group_lines(g) for g in pages[-1])


def place_notes(notes: list, room: float, rest: float, chars: int = PORTRAIT_CHARS) -> tuple[list, list[list]]:
    """(notes kept under the table, floats of notes after it): a table keeps its notes while they fit
    the `room` left on its last float (lines of `chars` characters); else every note goes to
    upright floats of their own, `rest` lines each."""
    def lines(n, width):
        return text_lines(n["text"] if isinstance(n, dict) else n, width)

    if sum(lines(n, chars) for n in notes) <= room:
        return list(notes), []
    pages, page, used = [], [], 1  # the heading line
    for n, k in ((n, lines(n, PORTRAIT_CHARS)) for n in notes):
        if page and used + k > rest:
            pages.append(page)
            page, used = [], 1
        page.append(n)
        used += k
    if page:
        pages.append(page)
    return [], pages


def arm_scope(s: dict, arm: str, scope: str = "completed") -> str:
    """The scope an artifact reads `arm` of the cell `s` from: for decodegap's own kernels (OWN_KERNELS),
    the newest measured-code version's sessions where the cell spans several (NEWEST_CODE), else
    `scope`. The floor table footnotes what each older version gave."""
    if arm in OWN_KERNELS and ((s.get(NEWEST_CODE) or {}).get("arms") or {}).get(arm):
        return NEWEST_CODE
    return scope


def best_arms(cells: list[dict], stats: dict, scope: str = "completed") -> dict:
    """{(quant, arm): (stats, cell id)}: per weight path and arm, the cell with the most sessions of
    that arm in the scope it is read from (arm_scope; the graphed arm is in every A/B cell against
    it: one row, from the cell that measured it most; the first such cell on a tie)."""
    best = {}
    for c in cells:
        s = stats.get(_cell_id(c))
        for arm in (((s or {}).get(scope) or {}).get("arms") or {}):
            a = s[arm_scope(s, arm, scope)]["arms"][arm]
            have = best.get((c["quant"], arm))
            if a and (have is None or a["n_sessions"] > have[0][arm_scope(have[0], arm, scope)]["arms"][arm]["n_sessions"]):
                best[(c["quant"], arm)] = (s, _cell_id(c))
    return best
