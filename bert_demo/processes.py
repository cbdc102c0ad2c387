"""Whether a process still runs: how what a killed process left behind (a checkpoint's temporary folder, a run's
claimed folder, a visitor's private copy) is told from what a live one is still writing. No torch: the app's start
sweeps with it before torch has loaded."""
from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether the process `pid` runs (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
