"""What unread large replies hold in memory, against the budget that bounds them (issue #24 item 8).

Clients that never read ask for large replies until the budget (``replies.MAX_UNSENT_REPLY_BYTES``,
made smaller here) refuses the rest (-31004). What the gateway then holds is measured as the
growth of its resident memory (it runs in this process), with glibc told to map every block
over 128 KiB on its own (``mallopt``): such a block is resident while it lives and returned when
it is freed, so the growth is what is held, not what the allocator kept from earlier tests.
It must stay within ``HELD_FACTOR_BOUND`` times the budget: the budget counts what a
reply costs while it waits (its bytes and the parsed message they were made from), not its
bytes alone (which let about twice the budget be held).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import socket

import anyio
import pytest

from gateway.http import replies
from gateway.http.connection import GuardedHttpTools
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from gateway.stdio.pool import PoolSettings
from tests.conftest import server_spec
from tests.gateway_server import app_for, loopback_socket, modern_call, modern_headers, serving
from tests.integration.test_hostile_http import WatchedDrain, connect, port_of, post_bytes

pytestmark = pytest.mark.anyio

MIB = 2**20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MAPPED_ABOVE = 128 * 1024
HELD_FACTOR_BOUND = 1.5
"""What unread replies may hold, as a multiple of their budget (docs/security.md): measured at
1.2 (the rest is the child's last line and the connections' buffers); 2.2 when the budget
counted the replies' bytes alone."""


class CountingBudget(replies.ReplyBudget):
    """The budget, counting the replies that hold part of it, each change told to ``drain``."""

    def __init__(self, limit: int, drain: WatchedDrain) -> None:
        super().__init__(limit)
        self.holders = 0
        self._drain = drain

    def take(self, size: int) -> bool:
        taken = super().take(size)
        if taken:
            self.holders += 1
            self._drain.changed.set()
            self._drain.changed = anyio.Event()
        return taken

    def give_back(self, size: int) -> None:
        super().give_back(size)
        self.holders -= 1


def map_large_blocks() -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not libc.mallopt(M_MMAP_THRESHOLD, MAPPED_ABOVE):
        pytest.skip("not glibc: resident memory would not show what is held")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


async def test_unread_large_replies_hold_about_their_budget_and_no_more(monkeypatch: pytest.MonkeyPatch) -> None:
    reply_bytes, clients = 4_000_000, 12
    drain = WatchedDrain()
    budget = CountingBudget(32 * MIB, drain)  # room for a few of the replies; the rest are refused
    monkeypatch.setattr(replies, "BUDGET", budget)
    patient = GuardedHttpTools.configured(write_timeout=120.0)  # the budget, not the timeout, is tested
    map_large_blocks()
    with anyio.fail_after(60):
        app = app_for(Router(ServerConfig("test", server_spec(), PoolSettings())), drain=drain)
        # Accepted connections inherit the listener's send buffer: a small fixed one (no
        # autotuning) so the kernel cannot take a whole 4 MB reply, whatever tcp_wmem allows.
        listener = loopback_socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        async with serving(app, listener, http=patient) as base:
            port = port_of(base)
            request = post_bytes(
                port, modern_call(1, "big", {"bytes": reply_bytes}), modern_headers("tools/call", "big")
            )
            gc.collect()
            before = resident_bytes()
            streams = [await connect(port, small_receive_buffer=True) for _ in range(clients)]
            try:
                for stream in streams:
                    await stream.send(request)
                # Every request holds part of the budget, or was refused and has finished.
                await drain.wait_for(lambda _: drain.finished + budget.holders == clients)
                held_replies = budget.holders
                gc.collect()
                held = resident_bytes() - before
                used = budget.used
            finally:
                for stream in streams:
                    await stream.aclose()
            await drain.wait_for(lambda in_flight: in_flight == 0)
    assert budget.used == 0
    assert 0 < held_replies < clients  # some were held, the rest refused
    assert used <= budget.limit
    assert held <= HELD_FACTOR_BOUND * budget.limit, (
        f"{held_replies} unread replies hold {held / MIB:.1f} MiB for a {budget.limit / MIB:g} MiB budget"
    )
