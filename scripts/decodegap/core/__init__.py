"""The small core both wings stand on; it imports neither of them.

  errors    exceptions whose message names the key or file at fault
  paths     every path the workflow writes or reads: the raw grammar, receipts, the manifest, cells,
            statistics, report tables and figures, provenance, logs
  config    config/gpus.yaml and config/models.yaml (GPU specs, model cards and their analytic shapes)
  cells     the decode modes, the cell keys, and the Plan of cells and targets a config names
  protocol  the measurement protocol (one definition: measure flags, record and schemas follow it)
            and the validity rules a session is judged by
  record    the session record: its builder, schema, exclusive write and checked read
  floor     the analytic memory floor t_floor = (W + K) / B_peak, the one formula
  manifest  results/raw.sha256, the committed hashes of every measured file
  sources   the measurement sources, their hashes, and the commits that hold them
"""
