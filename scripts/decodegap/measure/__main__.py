"""`python -m decodegap.measure ...`: measure one session of one cell (decodegap.measure.session)."""

import sys
import traceback

from decodegap.measure.session import log, main

try:
    sys.exit(main())
except Exception:
    traceback.print_exc()
    log("unexpected error: no record written")
    sys.exit(1)
