"""The analysis wing: raw sessions -> Parquet -> statistics -> tables, figures and provenance. It
never imports the measurement wing (tests/test_layout.py fails if it does), so it runs without torch.

  aggregate   raw session records -> per-cell sessions/steps Parquet tables (explicit schema)
  stats       per-cell medians with hierarchical bootstrap intervals, R_floor, A/B speedups, cost
  anatomy     where each millisecond of a step goes: floor, kernel inefficiency, graph gaps,
              launch tax, cache and framework
  hostmodel   per-launch host cost against the host CPU probe; the core speed that ends host-boundness
  stepmodel   a predictive model of step time fitted per GPU, with held-out error
  tables      LaTeX tables (jinja2, booktabs) with every number keyed for provenance
  latex       escaping, transliteration, number formatting, the jinja2 environment
  figures     seaborn figures (PDF and PNG), one shared style
  reference   the paper's published numbers (config/reference/paper.yaml)
  provenance  from any number in the report to its raw files (`python -m decodegap.analysis.provenance`)
  rulelog     the thin layer between a Snakemake rule and the functions above
  synthetic   synthetic session records for tests and benchmarks (never measurements)
"""
