"""Run a rule's body with its log: a DecodegapError (bad raw file, bad config) becomes one clear
line on the terminal and in the log, and exit status 1; anything else keeps its traceback."""

from __future__ import annotations

import contextlib
import sys
import traceback

from decodegap.core.errors import DecodegapError


def run_rule(snakemake, body) -> None:
    """body() or, where it takes one argument, body(say): say(line) writes a progress line to the log."""
    import inspect

    log_path = snakemake.log[0] if snakemake.log else None
    with open(log_path, "w") if log_path else contextlib.nullcontext(sys.stderr) as log:
        try:
            if inspect.signature(body).parameters:
                body(lambda line: print(line, file=log, flush=True))
            else:
                body()
            print(f"{snakemake.rule}: done", file=log)
        except DecodegapError as exc:
            msg = f"error in rule {snakemake.rule}: {exc}"
            print(msg, file=log)
            print(msg, file=sys.stderr)
            sys.exit(1)
        except Exception:
            traceback.print_exc(file=log)
            raise
