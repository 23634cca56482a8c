"""The defaults that more than one place needs (the run's options, the fold's settings, a
recording's header read back, the probes): written once here, so that a replay of a file
that says nothing folds with what the live run used.
"""

from __future__ import annotations

WINDOW_S = 10.0  # the sliding window of the live figures (--window)
DRIFT_ALERT_PCT_H = 5.0  # a drift faster than this alerts (--drift-alert, %/h)
