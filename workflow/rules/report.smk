# The paper's gathering file and the provenance of every number in it.


rule paper_tables:
    input:
        code=ANALYSIS_CODE,
        tables=TABLE_FILES,
        figures=FIGURE_FILES,
        # built with the tables, so that one target gives the whole report
        provenance=paths.PROVENANCE,
        data=[paths.ALL_SESSIONS, paths.ALL_STEPS],
    output:
        paths.PAPER_TABLES,
    log:
        paths.log("report", "paper_tables"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        figures=FIGURE_LIST,
    script:
        "../../scripts/rules/paper_tables.py"


rule provenance:
    input:
        code=ANALYSIS_CODE,
        numbers=[paths.table_numbers(name) for name in TABLE_NAMES],
        tables=TABLE_FILES,  # their hashes: a number edited by hand shows in `provenance check`
        stats=GROUP_STATS_DIRS,
        figures=[f for n in FIGURE_NAMES for f in paths.figure(n)],  # likewise a figure replaced
    output:
        paths.PROVENANCE,
    log:
        paths.log("report", "provenance"),
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../../scripts/rules/provenance.py"


# The reproduced paper as one document (pdflatex twice; the build fails on a float too large, an
# overfull box or an undefined reference: decodegap.analysis.paper). Part of the default target
# where pdflatex exists.
rule paper_pdf:
    input:
        code=ANALYSIS_CODE,
        tables=TABLE_FILES,
        figures=[paths.figure(n)[0] for n in FIGURE_NAMES],
    output:
        tex=paths.PAPER_TEX,
        pdf=paths.PAPER_PDF,
    log:
        paths.log("report", "paper_pdf"),
        latex=paths.log("report", "paper_pdf_latex"),
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        figures=FIGURE_LIST,
    script:
        "../../scripts/rules/paper_pdf.py"
