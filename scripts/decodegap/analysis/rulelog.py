"""Run a rule's body with its log: a DecodegapError (bad raw file, bad config) becomes one clear
line on the terminal and in the log, and exit status 1; anything else keeps its traceback."""

from __future__ import annotations

import contextlib
import sys
import traceback

from decodegap.core.errors import DecodegapError


def run_rule(snakemake, body) -> None:
    log_path = snakemake.log[0] if snakemake.log else None
    with open(log_path, "w") if log_path else contextlib.nullcontext(sys.stderr) as log:
        try:
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
