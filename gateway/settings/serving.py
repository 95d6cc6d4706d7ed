"""Settings listed first in ``--help-all``: binding, the child's time bounds, body and line
limits, scale-out, the log level.

Declared as ``gateway.settings.declaration.Setting``; ``gateway.settings`` gathers them."""

from __future__ import annotations

from typing import Final

from gateway.http.edge_settings import MAX_BODY_BYTES, MAX_STREAM_SECONDS, SSE_POLL_SECONDS
from gateway.protocol.eventlog import RESUME_WINDOW
from gateway.protocol.framing import DEFAULT_MAX_LINE_BYTES
from gateway.settings import convert
from gateway.settings.declaration import (
    CLIENT_CAPABILITIES,
    DEFAULT_HOST,
    DEFAULT_PORT,
    MAX_WORKERS,
    NO_CAPABILITY,
    SCALE_OUT,
    Setting,
    rule,
)
from gateway.stdio.spec import (
    HANDSHAKE_TIMEOUT,
    INPUT_TIMEOUT,
    PROBE_TIMEOUT,
    REQUEST_TIMEOUT,
    ROUND_TIMEOUT,
    STDERR_LOG_BURST,
    STDERR_LOG_RATE,
)
from gateway.stdio.writer import MAX_STDIN_QUEUE_BYTES, STDIN_STALL_TIMEOUT

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "--host",
        field="host",
        brief=True,
        default=DEFAULT_HOST,
        help="address to bind (default: %(default)s)",
    ),
    Setting(
        "--port",
        field="port",
        brief=True,
        check=rule(lambda v: 0 <= v <= 65535, "{value} is not a TCP port"),
        kind=int,
        default=DEFAULT_PORT,
        help="port to bind (default: %(default)s)",
    ),
    Setting(
        "--request-timeout",
        convert=convert.no_bound_at_zero,
        key="requestTimeout",
        target="spec.request_timeout",
        brief=True,
        kind=float,
        default=REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="cancel a request at the child after this long, progress or not: a hard bound so no request "
        "holds a child forever; 0 = none (default: %(default)s)",
    ),
    Setting(
        "--input-timeout",
        key="inputTimeout",
        target="spec.input_timeout",
        kind=float,
        default=INPUT_TIMEOUT,
        metavar="SECONDS",
        help="how long a child's sampling, elicitation or roots request waits for the client's answer "
        "(or a modern client's MRTR retry) before the child gets an error (default: %(default)s)",
    ),
    Setting(
        "--round-timeout",
        key="roundTimeout",
        target="spec.round_timeout",
        kind=float,
        default=ROUND_TIMEOUT,
        metavar="SECONDS",
        check=rule(lambda v: v > 0, "must be more than 0 seconds"),
        help="hold a modern client's call for its MRTR retry this long at most (within --input-timeout; a "
        "task's questions wait --input-timeout): then the call is cancelled at the child and a late retry "
        "gets requestState expired, so the client sends the call again (default: %(default)s)",
    ),
    Setting(
        "--client-capability",
        convert=convert.client_capabilities,
        key="clientCapabilities",
        target="spec.client_capabilities",
        repeat=True,
        metavar="NAME",
        choices=(*CLIENT_CAPABILITIES, NO_CAPABILITY),
        help="declare at most these client capabilities to legacy children at initialize: sampling, elicitation, "
        "roots, or a sub-field (sampling.tools, sampling.context, elicitation.form, elicitation.url, "
        "roots.listChanged; implies its capability) (repeatable; 'none' declares nothing, so compliant children "
        "never ask; default: all three). Each child is told what its client declared within these; children "
        "told different sets are separate",
    ),
    Setting(
        "--root",
        convert=convert.roots,
        key="roots",
        target="spec.roots",
        repeat=True,
        metavar="PATH_OR_URI",
        help="a root the gateway answers a child's roots/list with when no client can (repeatable; "
        "implies --client-capability roots)",
    ),
    Setting(
        "--state-secret-file",
        field="state_secret_file",
        metavar="FILE",
        help="the keys replicas share, one per line (each at least 16 bytes, at most 4): the first signs "
        "MRTR requestState tokens, session and task ids, forwards between replicas and /ui cookies, the "
        "others (previous keys) still verify; re-read when it changes, so a rotation needs no restart; "
        "give replicas the same file (default: a random per-process key)",
    ),
    Setting(
        "--advertise-url",
        field="advertise_url",
        metavar="URL",
        section=SCALE_OUT,
        help="this instance's base URL as the other replicas reach it (in Kubernetes, the pod IP; "
        "'auto': http://ADDRESS:PORT from this host's name, as in Docker): "
        "legacy sessions and parked MRTR calls name it, and a replica that gets a request for them "
        "forwards it here (needs --state-secret-file, shared by all replicas)",
    ),
    Setting(
        "--workers",
        field="workers",
        check=rule(lambda v: 1 <= v <= MAX_WORKERS, f"must be between 1 and {MAX_WORKERS}"),
        kind=int,
        default=1,
        metavar="N",
        section=SCALE_OUT,
        help="serve from N processes sharing the listening socket, each with its own children; "
        "sessions and parked calls are routed to the worker that holds them (default: %(default)s)",
    ),
    Setting(
        "--probe-timeout",
        key="probeTimeout",
        target="spec.probe_timeout",
        kind=float,
        default=PROBE_TIMEOUT,
        metavar="SECONDS",
        help="wait this long for the child's answer to server/discover (default: %(default)s)",
    ),
    Setting(
        "--startup-timeout",
        key="startupTimeout",
        target="spec.handshake_timeout",
        brief=True,
        kind=float,
        default=HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="wait this long for a legacy child's initialize (default: %(default)s)",
    ),
    Setting(
        "--max-line-bytes",
        key="maxLineBytes",
        target="spec.max_line_bytes",
        kind=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="BYTES",
        help="longest stdout line accepted from a child (default: %(default)s)",
    ),
    Setting(
        "--max-stdin-queue-bytes",
        key="maxStdinQueueBytes",
        target="spec.max_stdin_queue_bytes",
        check=rule(lambda v: v >= 1, "must be a positive number of bytes"),
        kind=int,
        default=MAX_STDIN_QUEUE_BYTES,
        metavar="BYTES",
        help="bytes that may wait for a child's stdin; a request past it gets 503 (default: %(default)s)",
    ),
    Setting(
        "--stdin-stall-timeout",
        key="stdinStallTimeout",
        target="spec.stdin_stall_timeout",
        check=rule(lambda v: v >= 0, "must be 0 or a positive number of seconds"),
        kind=float,
        default=STDIN_STALL_TIMEOUT,
        metavar="SECONDS",
        help=(
            "stop a child that reads nothing of its stdin this long while lines wait for it "
            "(and, for lines in the pipe, writes nothing); 0 = never (default: %(default)s)"
        ),
    ),
    Setting(
        "--max-body-bytes",
        field="max_body_bytes",
        check=rule(lambda v: v >= 1, "must be a positive number of bytes"),
        kind=int,
        default=MAX_BODY_BYTES,
        metavar="BYTES",
        help="largest POST body accepted (default: %(default)s)",
    ),
    Setting(
        "--max-stream-seconds",
        field="max_stream_seconds",
        check=rule(lambda v: v > 0, "must be a positive number of seconds"),
        kind=float,
        default=MAX_STREAM_SECONDS,
        metavar="SECONDS",
        help="end a legacy session's GET stream or a subscriptions/listen stream after this long; the client "
        "reconnects (default: %(default)s)",
    ),
    Setting(
        "--stream-resume-seconds",
        field="stream_resume_seconds",
        check=rule(lambda v: v > 0, "must be a positive number of seconds"),
        kind=float,
        default=RESUME_WINDOW,
        metavar="SECONDS",
        help="keep a legacy SSE stream nobody reads this long for a resume (Last-Event-ID); then its call "
        "is cancelled (default: %(default)s)",
    ),
    Setting(
        "--sse-poll-seconds",
        field="sse_poll_seconds",
        check=rule(lambda v: v >= 0, "must be 0 (off) or a positive number of seconds"),
        kind=float,
        default=SSE_POLL_SECONDS,
        metavar="SECONDS",
        help="close a 2025-11-25 session's request stream after this long with a retry hint, the call going "
        "on, so the client resumes; 0: off (default: %(default)s)",
    ),
    Setting(
        "--allowed-origin",
        field="allowed_origins",
        repeat=True,
        metavar="ORIGIN",
        help="browser Origin allowed to call the gateway (repeatable)",
    ),
    Setting(
        "--allowed-host",
        field="allowed_hosts",
        repeat=True,
        metavar="HOST",
        help="extra Host header value accepted when bound to loopback (repeatable)",
    ),
    Setting(
        "--log-level",
        field="log_level",
        brief=True,
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="least severe log level written (default: %(default)s)",
    ),
    Setting(
        "--child-stderr-log",
        key="childStderrLog",
        target="spec.stderr_log",
        convert=convert.on_off,
        default="on",
        choices=("on", "off"),
        help="log every line a child writes to stderr as a record of its own (logger gateway.child.stderr; at "
        f"most {STDERR_LOG_BURST} lines at once and {STDERR_LOG_RATE:g} a second per child, the rest counted; "
        "values that look like credentials redacted); the last lines are kept for errors and /status either "
        "way (default: %(default)s)",
    ),
)
