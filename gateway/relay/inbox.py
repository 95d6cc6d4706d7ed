"""The bounded queue between a producer that never waits and one reader, for the HTTP edge.

``gateway.stdio.inbox`` holds it: a child's messages wait in one for their exchange. A
detached legacy exchange's messages wait in one for the HTTP reader
(``gateway.http.stream.Detached``), which reaches it here, through the relay layer.
"""

from __future__ import annotations

from gateway.stdio.inbox import Inbox, progress_key

__all__ = ["Inbox", "progress_key"]
