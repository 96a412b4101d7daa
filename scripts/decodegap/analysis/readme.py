"""The README's findings, rendered from the report's own numbers.

The block between `<!-- findings -->` and `<!-- /findings -->` in README.md is rendered from
templates/findings.md: every `[[KEY]]` there is the text the report renders for that provenance key
(report/provenance.json), so a sentence of the README cannot say another number than the report.
`[[KEY|.2f]]` rounds the report's number with a format spec (fewer digits, never another value).

    python -m decodegap.analysis.readme            rewrite the block from report/provenance.json
    python -m decodegap.analysis.readme --check    exit 1 (naming the first difference) when the README's
                                                   block is not what the report's numbers render

tests/test_readme.py renders it from the bundled report's numbers (tests/data/bundled_report_numbers.tsv)
and compares it with the README.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from decodegap.core.config import REPO_ROOT
from decodegap.core.errors import ConfigError

TEMPLATE = Path(__file__).parent / "templates" / "findings.md"
README = REPO_ROOT / "README.md"
START, END = "<!-- findings -->", "<!-- /findings -->"
KEY = re.compile(r"\[\[([^\[\]|]+)(?:\|([^\[\]]+))?\]\]")


def numbers_of_provenance(path: str | Path) -> dict[str, str]:
    return {k: e["text"] for k, e in json.loads(Path(path).read_text())["numbers"].items()}


def numbers_of_tsv(path: str | Path) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in Path(path).read_text().splitlines() if "\t" in line)


def render(numbers: dict[str, str], template: str | None = None) -> str:
    """The findings block's text, each [[KEY]] replaced by the report's text for it; a key the
    report does not have is a ConfigError naming it."""
    text = template if template is not None else TEMPLATE.read_text()
    missing = sorted({k for k, _ in KEY.findall(text) if k not in numbers})
    if missing:
        raise ConfigError(f"{TEMPLATE.name}: keys the report does not render: {', '.join(missing[:5])}")

    def one(m: re.Match) -> str:
        key, spec = m.group(1), m.group(2)
        if not spec:
            return numbers[key]
        try:
            return format(float(numbers[key].replace(",", "")), spec)
        except ValueError as exc:
            raise ConfigError(f"{TEMPLATE.name}: [[{key}|{spec}]]: {exc}") from None

    return KEY.sub(one, text)


def block_of(readme: str) -> str:
    if START not in readme or END not in readme:
        raise ConfigError(f"README.md has no {START} ... {END} block")
    return readme.split(START, 1)[1].split(END, 1)[0].strip("\n")


def with_block(readme: str, block: str) -> str:
    head, rest = readme.split(START, 1)
    return f"{head}{START}\n{block.strip()}\n{END}{rest.split(END, 1)[1]}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m decodegap.analysis.readme", description=__doc__.split("\n\n")[0])
    p.add_argument("--provenance", default="report/provenance.json", help="the built report's numbers")
    p.add_argument("--check", action="store_true", help="compare, write nothing")
    args = p.parse_args(argv)
    try:
        block = render(numbers_of_provenance(args.provenance))
        readme = README.read_text()
        if args.check:
            if block_of(readme) == block.strip("\n"):
                print("README findings: as the report renders them")
                return 0
            ours, theirs = block_of(readme).splitlines(), block.strip("\n").splitlines()
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            print(f"README findings differ from the report at line {first + 1} of the block:\n  README: "
                  f"{(ours + [''])[first]}\n  report: {(theirs + [''])[first]}", file=sys.stderr)
            return 1
        README.write_text(with_block(readme, block))
        print(f"README findings rewritten from {args.provenance}")
        return 0
    except (ConfigError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
