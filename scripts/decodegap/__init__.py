"""decodegap: batch-1 LLM decode measured on real GPUs, from raw sessions to a paper's tables.

Two wings over a small core, each folder one stage of the work:
  core/      what both wings share: paths, cells, config, the protocol, the record, the floor,
             the manifest, source hashes, errors (imports neither wing)
  measure/   what runs on the GPU: cards, modes, attention and weight paths, timing, environment,
             the session command, batch, ingest
  analysis/  what runs anywhere: aggregate, statistics, tables, figures, provenance (never imports
             the measurement wing, so it needs no torch)
Each folder's __init__ lists its modules.
"""

__version__ = "0.1.0"
