"""The relay layer: one HTTP exchange joined to one child exchange.

It sits between the HTTP edge (``gateway.http``) and the stdio edge (``gateway.stdio``):
the router picks a pool, the relay drives the child exchange and bridges eras, and the
session store (with each session's child and pool), the gateway's own part of legacy
sessions (``legacy``), the listens (``listens``, ``session_listen``), what children send
unasked (``unsolicited``), the parked MRTR calls, the per-client settings of shared
children, the tool catalog and this instance's owner identity live here. The HTTP edge
reaches children and pools only through it. It imports ``stdio``, ``protocol``, ``errors``
and ``oauth.validation`` (pure), never ``http``.
"""
