# Snakemake entry point: report/paper.tex and report/paper.pdf, every table and figure in one document.
from decodegap.analysis.paper import paper_pdf
from decodegap.analysis.rulelog import run_rule


def body():
    report = paper_pdf(snakemake.input.tables, snakemake.params.figures, snakemake.output.tex, snakemake.output.pdf,
                       latex_log=snakemake.log.latex)
    print(f"{snakemake.output.pdf}: {report.summary()}")


run_rule(snakemake, body)
