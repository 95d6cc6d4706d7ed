"""Operations over fake children: readiness and ``/status`` for a server whose child cannot
start, and a principal's request slots. Moved here from tests/integration/test_operations.py
and test_security.py, where they polled ``/status`` or retried requests until a state came."""

from __future__ import annotations

import anyio
import pytest

from tests.component.fakechild import Script, fake_backend
from tests.component.harness import in_process_gateway
from tests.gateway_server import modern_call, modern_headers

pytestmark = pytest.mark.anyio

BOUND = 20.0


async def test_readiness_names_a_failing_server_and_status_gives_its_reason() -> None:
    script = Script(exit_at_start=4, stderr_at_start=("fatal: configured to exit",))
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, in_process_gateway(backend) as gw:
            # The pre-warmed child's start failed or is failing: either way this request's
            # answer is that failure (it waits for the start, or fails fast after it).
            reply = await gw.http.post(
                gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {"message": "x"})
            )
            assert "exited with code 4" in reply.json()["error"]["message"]
            status = (await gw.http.get("/status")).text
            assert "exited with code 4" in status
            assert "fatal: configured to exit" in status  # the details, on the authenticated page
            ready = await gw.http.get("/readyz")
            assert ready.status_code == 503
            assert ready.text in ("not ready: test starting\n", "not ready: test failing\n")  # no stderr


async def test_a_principal_over_its_concurrency_limit_gets_429() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, max_requests_per_principal=1) as gw,
            anyio.create_task_group() as tg,
        ):
            answered = anyio.Event()

            async def first() -> None:
                await gw.http.post(gw.url, headers=modern_headers("tools/call", "hold"), json=modern_call(1, "hold"))
                answered.set()

            tg.start_soon(first)
            [held] = await backend.wait_calls(1)  # the first request holds the principal's one slot
            second = await gw.http.post(gw.url, headers=modern_headers("tools/list"), json=modern_call(2, "x"))
            assert second.status_code == 429
            assert second.headers["retry-after"] == "1"
            held.release()
            await answered.wait()
            third = await gw.http.post(gw.url, headers=modern_headers("tools/list"), json=modern_call(3, "x"))
            assert third.status_code != 429  # the slot is free again once the first is answered
