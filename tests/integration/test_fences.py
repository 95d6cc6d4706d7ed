"""The library internals the gateway relies on are still there, in the versions it was tested with.

``docs/architecture.md`` ("Library internals the gateway touches") lists each one; ``pyproject.toml``
pins each library to the range these tests ran. An upgrade that moves one of them fails here,
by name, instead of degrading quietly:

- uvicorn's httptools protocol (``GuardedHttpTools`` subclasses it): the methods it overrides,
  the attributes it reads, the names it adds (which a new uvicorn must not define, or one side
  would silently replace the other: the mTLS class once shadowed ``_peer`` so that every
  refusal raised), ``STATUS_LINE``, how uvicorn calls its ``http`` class, ``get_remote_addr``;
- that uvicorn writes a response through the protocol's ``transport`` (``GuardedHttpTools``
  puts ``HeldHead`` there, so a head and its body leave in one write);
- uvicorn's ``Server`` (``DrainingServer`` subclasses it): ``handle_exit``, the signal
  handler, ``main_loop``, the coroutine the drain task runs beside (so the drain has an
  owner), and ``serve``, which the ops listener runs beside, with the names ``DrainingServer``
  adds not among uvicorn's; for ``OpsServer`` (``--ops-listen``), that uvicorn installs signal
  handlers in ``capture_signals`` only, which it overrides;
- anyio's process stdin (``PipeWriter.over`` reads its ``_stream``): a real child's stdin is
  a ``PipeWriter``, and anything else is refused loudly;
- anyio's asyncio cancel scope (``Watch`` makes ``anyio._backends._asyncio.CancelScope``
  directly): it is what ``anyio.CancelScope()`` makes on asyncio, and it cancels as one;
- the TLS protocols of asyncio and uvloop (``TlsHandshake``): exercised on both loops by
  ``test_tls_limits.py``;
- Starlette's ``middleware_stack`` (``http/app.py`` puts the gateway's edge there): built once
  and called by ``Starlette.__call__``;
- prometheus-client's ``_use_created`` (``PROMETHEUS_DISABLE_CREATED_SERIES``, read by the
  request counter's collector) and ``utils.floatToGoString`` (the histogram's bound labels);
- the standard library's ``QueueListener``: ``dequeue(block)`` (overridden by
  ``ops/logs.py``'s batching listener) and its ``_sentinel``, which ``_monitor`` compares.
"""

from __future__ import annotations

import asyncio
import inspect
import logging.handlers
import queue
import re
import sys
import tomllib
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path

import anyio
import orjson
import pytest
import uvicorn
from anyio._backends._asyncio import CancelScope as AsyncioCancelScope
from packaging.requirements import Requirement
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.utils import floatToGoString
from starlette.applications import Starlette
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from gateway.http.connection import GuardedHttpTools
from gateway.http.drain import Drain
from gateway.http.sse import Watch
from gateway.http.tls import PeerSubjects, TlsHandshake, peer_protocol
from gateway.protocol import answer
from gateway.server import DrainingServer, OpsServer
from gateway.stdio.backend import PROCESS_BACKEND, PipeWriter
from tests.conftest import server_spec

pytestmark = pytest.mark.anyio

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
FENCED = ("uvicorn", "httptools", "anyio", "uvloop", "starlette", "prometheus-client")
"""The libraries whose internals the gateway touches (docs/architecture.md)."""

OVERRIDDEN = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_headers_complete",
    "on_message_complete",
    "pause_writing",
    "resume_writing",
)
"""HttpToolsProtocol methods GuardedHttpTools overrides (each calls the base's)."""
READ = ("loop", "transport", "cycle", "scope", "client", "pipeline")
"""HttpToolsProtocol attributes GuardedHttpTools reads (and of the cycle: ``scope``,
``response_complete``; ``flow``, set by ``connection_made``)."""


def pinned() -> dict[str, Requirement]:
    with PYPROJECT.open("rb") as file:
        project = tomllib.load(file)["project"]
    requirements = [Requirement(line) for line in project["dependencies"]]
    return {requirement.name: requirement for requirement in requirements}


def test_every_fenced_library_is_pinned_and_installed_within_its_pin() -> None:
    requirements = pinned()
    for name in FENCED:
        assert name in requirements, f"{name} is fenced (docs/architecture.md) but not pinned in pyproject.toml"
        specifier = requirements[name].specifier
        assert any(spec.operator == "<" for spec in specifier), f"{name}'s pin has no upper bound: {specifier}"
        assert specifier.contains(version(name)), f"{name} {version(name)} is outside the tested range {specifier}"


async def base_protocol() -> httptools_impl.HttpToolsProtocol:
    async def app(scope: object, receive: object, send: object) -> None:  # never called
        raise AssertionError

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    return httptools_impl.HttpToolsProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())


async def test_the_httptools_protocol_still_has_what_the_guarded_protocol_overrides_and_reads() -> None:
    base = httptools_impl.HttpToolsProtocol
    for name in OVERRIDDEN:
        assert callable(getattr(base, name, None)), f"uvicorn's HttpToolsProtocol has no {name}()"
        assert name in vars(GuardedHttpTools), name  # overridden here, so a rename upstream is caught above
    instance = await base_protocol()
    for name in READ:
        assert name in vars(instance), f"HttpToolsProtocol().{name} is gone"
    assert "self.flow = FlowControl(transport)" in inspect.getsource(base.connection_made)
    assert callable(getattr(FlowControl, "resume_reading", None))
    cycle = inspect.getsource(httptools_impl.RequestResponseCycle.__init__)
    assert "self.scope = scope" in cycle
    assert "self.response_complete = " in cycle
    init = inspect.signature(base.__init__).parameters
    assert {"config", "server_state", "app_state"} <= set(init), "uvicorn calls its http class differently now"
    assert {408, 431, 503} <= set(httptools_impl.STATUS_LINE), "STATUS_LINE lost a status the refusals use"
    assert list(inspect.signature(get_remote_addr).parameters) == ["transport"]


async def test_no_name_the_gateway_adds_to_the_httptools_protocol_is_one_of_uvicorns() -> None:
    base = httptools_impl.HttpToolsProtocol
    instance = await base_protocol()
    theirs = set(dir(base)) | set(vars(instance)) | {"transport", "scope", "client", "cycle"}
    guarded = GuardedHttpTools(instance.config, ServerState(), {}, _loop=asyncio.get_running_loop())
    ours = (set(vars(GuardedHttpTools)) | set(vars(guarded))) - set(vars(instance)) - set(OVERRIDDEN)
    ours -= {"__module__", "__doc__", "__init__", "__annotations__", "__dict__", "__weakref__"}
    ours -= {"__firstlineno__", "__static_attributes__"}  # every class's, from Python 3.13
    ours |= set(GuardedHttpTools.__annotations__)  # set later than __init__ (``_held_head``)
    assert "_held_head" in ours
    assert not ours & theirs, f"uvicorn now defines names GuardedHttpTools adds: {sorted(ours & theirs)}"
    # The mTLS protocol adds its own too: none may shadow a name of the classes below it.
    mutual = peer_protocol(PeerSubjects())
    added = set(vars(mutual)) - {"connection_made", "connection_lost", "__module__", "__doc__", "__qualname__"}
    added -= {"__annotations__", "__firstlineno__", "__static_attributes__"}
    assert added, "nothing found to check"
    assert not added & (theirs | set(dir(GuardedHttpTools))), sorted(added & (theirs | set(dir(GuardedHttpTools))))
    assert issubclass(TlsHandshake, asyncio.Protocol)


class Written(asyncio.Transport):
    """A connection's transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.written = asyncio.Event()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        self.written.set()

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_uvicorn_writes_the_response_through_the_protocols_transport_head_and_body_at_once() -> None:
    Send = Callable[[dict[str, object]], Awaitable[None]]

    async def app(scope: dict[str, object], receive: object, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    protocol = GuardedHttpTools(config, ServerState(), {}, _loop=asyncio.get_running_loop())
    transport = Written()
    protocol.connection_made(transport)
    try:
        protocol.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        with anyio.fail_after(10):
            await transport.written.wait()
        assert len(transport.writes) == 1, transport.writes  # not the head, then the body
        assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
        assert transport.writes[0].endswith(b"\r\n\r\n{}")
    finally:
        protocol.connection_lost(None)


def test_uvicorns_server_still_has_what_the_draining_server_overrides_and_none_of_its_names() -> None:
    base = uvicorn.Server
    # Read from the source: sse_starlette, once imported (the MCP SDK does), replaces
    # Server.handle_exit with a wrapper of its own, which calls uvicorn's.
    source = inspect.getsource(uvicorn.server)
    assert "def handle_exit(self, sig: int, frame: FrameType | None)" in source, "uvicorn's signal handler changed"
    assert "signal.signal(sig, self.handle_exit)" in source, "uvicorn no longer installs handle_exit for signals"
    assert inspect.iscoroutinefunction(base.main_loop), "uvicorn.Server.main_loop is gone or no longer a coroutine"
    assert list(inspect.signature(base.main_loop).parameters) == ["self"]
    assert "await self.main_loop()" in inspect.getsource(base._serve), "uvicorn no longer runs main_loop"
    assert inspect.iscoroutinefunction(base.serve), "uvicorn.Server.serve is gone or no longer a coroutine"
    assert list(inspect.signature(base.serve).parameters) == ["self", "sockets"]
    assert "self.serve(sockets=sockets)" in inspect.getsource(base.run), "uvicorn's run no longer runs serve"
    for name in ("handle_exit", "main_loop", "serve"):
        assert name in vars(DrainingServer), name  # overridden there, so a rename upstream is caught above
    # A second signal sets should_exit itself (uvicorn's handle_exit would record the signal and
    # raise it again once it has put back the default handlers): the main loop reads it.
    assert "if self.should_exit:" in inspect.getsource(base.on_tick), "uvicorn's main loop no longer reads should_exit"
    config = uvicorn.Config(lambda scope, receive, send: None, lifespan="off", log_level="warning")
    theirs = set(dir(base)) | set(vars(base(config)))
    ours = {name for name in vars(DrainingServer(config, Drain(), 1.0)) if name not in vars(base(config))}
    ours |= set(vars(DrainingServer)) - {"__module__", "__doc__", "__init__", "handle_exit", "main_loop", "serve"}
    ours -= {"__annotations__", "__firstlineno__", "__static_attributes__", "__qualname__"}
    assert ours, "nothing found to check"
    assert not ours & theirs, f"uvicorn.Server now defines names DrainingServer adds: {sorted(ours & theirs)}"


def test_the_ops_server_takes_no_signal_because_uvicorn_installs_them_in_capture_signals_only() -> None:
    base = uvicorn.Server
    source = inspect.getsource(uvicorn.server)
    # OpsServer (--ops-listen) runs a second Server in the process: were uvicorn to install its
    # handlers anywhere but capture_signals, that server would take SIGTERM from the draining one.
    assert source.count("signal.signal(") == 2, "uvicorn installs signal handlers somewhere new"
    assert "signal.signal(" not in inspect.getsource(base._serve)
    assert "with self.capture_signals():" in inspect.getsource(base.serve)
    assert "signal.signal(sig, self.handle_exit)" in inspect.getsource(base.capture_signals)
    assert "capture_signals" in vars(OpsServer)
    config = uvicorn.Config(lambda scope, receive, send: None, lifespan="off", log_level="warning")
    theirs = set(dir(base)) | set(vars(base(config)))
    ours = ({name for name in vars(OpsServer(config)) if name not in vars(base(config))} | set(vars(OpsServer))) - {
        "__module__",
        "__doc__",
        "__init__",
        "capture_signals",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
        "__qualname__",
    }
    assert ours == {"ops_sockets", "over"}
    assert not ours & theirs, f"uvicorn.Server now defines names OpsServer adds: {sorted(ours & theirs)}"


async def test_a_real_childs_stdin_is_written_through_the_pipe_writer() -> None:
    with anyio.fail_after(30):
        child = await PROCESS_BACKEND.open(server_spec())
        try:
            assert isinstance(child.stdin, PipeWriter), "anyio's process stdin changed: PipeWriter.over refused it"
            await child.stdin.send(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
            read = bytearray()
            answered = anyio.Event()

            def deliver(chunk: bytes) -> None:
                read.extend(chunk)
                if read.endswith(b"\n"):
                    answered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(child.read_stdout, deliver)
                await answered.wait()
                tg.cancel_scope.cancel()
            assert orjson.loads(read) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        finally:
            await child.stop()


async def test_a_stdin_that_is_not_anyios_asyncio_stream_is_refused_not_used_another_way() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](1)
    with send, receive, pytest.raises(TypeError, match=r"docs/architecture\.md"):
        PipeWriter.over(send)  # type: ignore[arg-type]


async def test_the_watchs_cancel_scope_is_the_one_anyio_makes_on_asyncio_and_cancels_as_one() -> None:
    assert type(anyio.CancelScope()) is AsyncioCancelScope, "anyio's asyncio CancelScope moved: see sse.Watch"
    watch = Watch({"type": "http"}, lambda: None, answer.Kind.CALL, lambda event: None)  # type: ignore[arg-type,return-value]
    scope = watch.cancel_scope
    assert type(scope) is AsyncioCancelScope
    assert scope.deadline == float("inf")
    assert not scope.shield
    assert not scope.cancel_called
    with anyio.fail_after(5):
        with scope:
            scope.cancel()
            await anyio.sleep(5)
    assert scope.cancelled_caught


def test_the_fence_list_in_the_architecture_page_names_every_fenced_library() -> None:
    page = (PYPROJECT.parent / "docs" / "architecture.md").read_text()
    section = page.split("## Library internals the gateway touches", 1)[1].split("\n## ", 1)[0]
    for name in FENCED:
        assert f"`{name}`" in section, name
    assert sys.version_info >= (3, 11)


async def test_starlette_calls_the_middleware_stack_the_app_puts_its_edge_in() -> None:
    seen: list[str] = []

    async def edge(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(str(scope["type"]))

    app = Starlette()
    assert "middleware_stack" in vars(app), "Starlette() no longer has middleware_stack"
    assert callable(app.build_middleware_stack)
    app.middleware_stack = edge  # what http/app.py does with the gateway's edge
    await app({"type": "http"}, None, None)  # type: ignore[arg-type]
    assert seen == ["http"], "Starlette.__call__ no longer calls middleware_stack"


def test_prometheus_client_still_has_the_created_switch_and_go_float_format() -> None:
    assert isinstance(getattr(prometheus_metrics, "_use_created", None), bool), "_use_created is gone"
    assert [floatToGoString(v) for v in (0.005, 1.0, 2.5, float("inf"))] == ["0.005", "1.0", "2.5", "+Inf"]


def test_the_queue_listener_still_reads_through_dequeue_and_stops_at_its_sentinel() -> None:
    listener = logging.handlers.QueueListener(queue.SimpleQueue())
    assert hasattr(listener, "_sentinel"), "QueueListener._sentinel is gone"
    assert list(inspect.signature(listener.dequeue).parameters) == ["block"]
    monitor = inspect.getsource(logging.handlers.QueueListener._monitor)
    assert "self.dequeue(True)" in monitor
    assert "is self._sentinel" in monitor


GATEWAY = PYPROJECT.parent / "gateway"
INTERNALS = {
    "uvicorn.Server": "subclasses `uvicorn.Server`",
    "HttpToolsProtocol": "subclasses `uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`",
    "httptools.feed_data": "calls `on_headers_complete` / `on_message_complete` synchronously inside `feed_data`",
    "anyio.CancelScope": "`anyio._backends._asyncio.CancelScope`",
    "anyio.StreamWriterWrapper": "`StreamWriterWrapper._stream`",
    "logging.LogRecord": "`LogRecord`'s fields",
    "loop.start_tls": "`loop.start_tls` on a server transport",
    "Starlette.middleware_stack": "`Starlette.middleware_stack`",
    "prometheus_client._use_created": "`prometheus_client.metrics._use_created`",
    "prometheus_client.floatToGoString": "`prometheus_client.utils.floatToGoString`",
    "QueueListener._sentinel": "`QueueListener._sentinel`",
}
"""Each internal the code reads (its ``# fenced: KEY`` marker) → how the table names it."""
MARKER = re.compile(r"#\s*fenced:\s*([\w.]+)")
UNMARKED_INTERNAL = re.compile(
    r"^\s*(from|import)\s+\w+(\.\w+)*\._\w+"  # a private module of a library
    r"|getattr\([^,]+,\s*[\"']_"  # a private attribute read by name
    r"|\b(logging|asyncio|anyio|uvicorn|starlette|prometheus_client|httptools|uvloop)(\.\w+)*\._[a-zA-Z]"
    r"|\.middleware_stack\s*="
)
"""Lines that read a library's internals: each needs a marker on it or on the line above."""


def marked_lines() -> tuple[dict[str, list[str]], list[str]]:
    """Markers found in gateway/ (key → where), and unmarked lines that look like internals."""
    found: dict[str, list[str]] = {}
    unmarked: list[str] = []
    for path in sorted(GATEWAY.rglob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            where = f"{path.relative_to(PYPROJECT.parent)}:{number}"
            for key in MARKER.findall(line):
                found.setdefault(key, []).append(where)
            code = line.split("#", 1)[0] if not line.lstrip().startswith(("'", '"')) else ""
            if UNMARKED_INTERNAL.search(code) and not (
                MARKER.search(line) or (number > 1 and MARKER.search(lines[number - 2]))
            ):
                unmarked.append(f"{where}: {line.strip()}")
    return found, unmarked


def test_the_table_names_every_internal_the_code_marks_and_the_code_marks_every_internal_it_reads() -> None:
    found, unmarked = marked_lines()
    assert not unmarked, "library internals read without a `# fenced:` marker (add it, a row, a test):\n" + "\n".join(
        unmarked
    )
    assert set(found) == set(INTERNALS), f"markers in the code {sorted(found)} != the fenced list {sorted(INTERNALS)}"
    page = (PYPROJECT.parent / "docs" / "architecture.md").read_text()
    table = page.split("## Library internals the gateway touches", 1)[1].split("\n## ", 1)[0]
    for key, named in INTERNALS.items():
        assert named in table, f"{key} (used at {found[key]}) has no row in docs/architecture.md's table"
