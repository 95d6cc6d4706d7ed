"""The "slow" benchmark backend: the echo server, serial, with fixed work per call.

Each ``tools/call`` waits ``--work-ms`` (default 10 ms) before answering, one call at a time,
like most real servers (an API request, a disk read). The work is waiting, not CPU: on a
2-core machine a CPU-bound child could never show a pool of 4 or 8 scaling.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from echo import main

DEFAULT_WORK_MS = 10.0

if __name__ == "__main__":
    main(work_ms=DEFAULT_WORK_MS)
