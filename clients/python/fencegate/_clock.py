"""The clock a lease's deadline is read on.

A deadline is a local promise that the server still holds the lease, so the clock it is read
on must count every second the server counts. `time.monotonic` is CLOCK_MONOTONIC on Linux,
which stands still while the machine is suspended: a host resumed after its lease ran out
would believe it still held it. CLOCK_BOOTTIME counts the suspended time too; where it does
not exist (macOS's monotonic clock already counts sleep, Windows' too), `time.monotonic` is
the clock.
"""

from __future__ import annotations

import time
from typing import Callable


def _pick() -> Callable[[], float]:
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        try:
            time.clock_gettime(boottime)
        except OSError:
            # A kernel too old for it (before Linux 2.6.39).
            pass
        else:
            return lambda: time.clock_gettime(boottime)
    return time.monotonic


_read = _pick()


def now() -> float:
    """Seconds on the lease clock: only differences mean anything."""
    return _read()
