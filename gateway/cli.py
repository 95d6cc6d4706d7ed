"""Command line: parse arguments into ``Settings`` and hand them to ``server.run``. No logic.

``mcp-stdio-gateway call …`` and ``mcp-stdio-gateway inspect …`` are subcommands, dispatched
on the first argument before the serve parser runs, so ``mcp-stdio-gateway [serve options]
[-- COMMAND …]`` keeps working unchanged.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from gateway import __version__, helptext
from gateway.config import DEFAULT_HOST, DEFAULT_PORT, DRAIN_TIMEOUT, Settings, demo_command
from gateway.configfile import load_servers, parse_root
from gateway.errors import ConfigError
from gateway.helptext import NOT_SETTINGS
from gateway.http.endpoint import MAX_BODY_BYTES, MAX_STREAM_SECONDS
from gateway.http.limits import MAX_REQUESTS_PER_PRINCIPAL, MAX_STREAMS_PER_PRINCIPAL
from gateway.oauth.validation import DEFAULT_PRINCIPAL_CLAIM, OAuthPolicy
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.framing import DEFAULT_MAX_LINE_BYTES
from gateway.protocol.ingress import MAX_BATCH_MESSAGES
from gateway.relay.router import DualEra, Isolation, ServerConfig
from gateway.relay.sessions import MAX_SESSIONS_PER_PRINCIPAL
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import HANDSHAKE_TIMEOUT, INPUT_TIMEOUT, PROBE_TIMEOUT, REQUEST_TIMEOUT, ChildSpec

CLIENT_CAPABILITIES = ("sampling", "elicitation", "roots")
"""What ``--client-capability`` may declare to legacy children (the ones they can ask for)."""
NO_CAPABILITY = "none"
"""``--client-capability none``: declare nothing (compliant children then never ask)."""


def build_parser() -> argparse.ArgumentParser:
    parser = helptext.BriefHelpParser(
        prog="mcp-stdio-gateway",
        usage=helptext.MAIN_USAGE,
        description=helptext.MAIN_DESCRIPTION,
        epilog=helptext.MAIN_EPILOG,
        formatter_class=helptext.formatter(env_name),
        brief=helptext.BRIEF_OPTIONS,
    )
    parser.add_argument("--help-all", action=helptext.HelpAllAction)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind (default: %(default)s)")
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="cancel a request at the child after this long, progress or not: a hard bound so no request "
        "holds a child forever; 0 = none (default: %(default)s)",
    )
    parser.add_argument(
        "--input-timeout",
        type=float,
        default=INPUT_TIMEOUT,
        metavar="SECONDS",
        help="how long a child's sampling, elicitation or roots request waits for the client's answer "
        "(or a modern client's MRTR retry) before the child gets an error (default: %(default)s)",
    )
    parser.add_argument(
        "--client-capability",
        action="append",
        default=[],
        choices=(*CLIENT_CAPABILITIES, NO_CAPABILITY),
        metavar="NAME",
        help="declare only these client capabilities (sampling, elicitation, roots) to legacy children at "
        "initialize (repeatable; 'none' declares nothing, so compliant children never ask; default: all three, "
        "and a client that lacks one gets the child's question refused)",
    )
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="PATH_OR_URI",
        help="a root the gateway answers a child's roots/list with when no client can (repeatable; "
        "implies --client-capability roots)",
    )
    parser.add_argument(
        "--state-secret-file",
        default=None,
        metavar="FILE",
        help="HMAC key for MRTR requestState tokens (at least 16 bytes); give replicas the same file "
        "(default: a random per-process key)",
    )
    scale = parser.add_argument_group("scale-out (any replica, any request)")
    scale.add_argument(
        "--advertise-url",
        default=None,
        metavar="URL",
        help="this instance's base URL as the other replicas reach it (in Kubernetes, the pod IP; "
        "'auto': http://ADDRESS:PORT from this host's name, as in Docker): "
        "legacy sessions and parked MRTR calls name it, and a replica that gets a request for them "
        "forwards it here (needs --state-secret-file, shared by all replicas)",
    )
    scale.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve from N processes sharing the listening socket, each with its own children; "
        "sessions and parked calls are routed to the worker that holds them (default: %(default)s)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=PROBE_TIMEOUT,
        metavar="SECONDS",
        help="wait this long for the child's answer to server/discover (default: %(default)s)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help="wait this long for a legacy child's initialize (default: %(default)s)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="BYTES",
        help="longest stdout line accepted from a child (default: %(default)s)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        metavar="BYTES",
        help="largest POST body accepted (default: %(default)s)",
    )
    parser.add_argument(
        "--max-stream-seconds",
        type=float,
        default=MAX_STREAM_SECONDS,
        metavar="SECONDS",
        help="end a legacy session's GET stream after this long; the client reconnects (default: %(default)s)",
    )

    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed to call the gateway (repeatable)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="extra Host header value accepted when bound to loopback (repeatable)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log level written (default: %(default)s)",
    )
    pool = parser.add_argument_group("pool and isolation")
    defaults = PoolSettings()
    pool.add_argument(
        "--pool-min",
        type=int,
        default=defaults.min_size,
        metavar="N",
        help="children started (and kept) before traffic (default: %(default)s)",
    )
    pool.add_argument(
        "--pool-max",
        type=int,
        default=None,
        metavar="N",
        help="children at most, started on demand (default: --pool-min, at least 1)",
    )
    pool.add_argument(
        "--max-in-flight",
        type=int,
        default=defaults.max_in_flight,
        metavar="N",
        help="requests at once per child; 1 serialises, 0 = no limit (default: %(default)s)",
    )
    pool.add_argument(
        "--queue-timeout",
        type=float,
        default=defaults.queue_timeout,
        metavar="SECONDS",
        help="wait this long for a free child, then 503 + Retry-After (default: %(default)s)",
    )
    pool.add_argument(
        "--idle-timeout",
        type=float,
        default=defaults.idle_timeout,
        metavar="SECONDS",
        help="stop children above --pool-min after this long unused (default: %(default)s)",
    )
    pool.add_argument(
        "--max-requests",
        type=int,
        default=defaults.max_requests,
        metavar="N",
        help="recycle a child after N requests; 0 = never (default: %(default)s)",
    )
    pool.add_argument(
        "--max-age",
        type=float,
        default=defaults.max_age,
        metavar="SECONDS",
        help="recycle a child after this long; 0 = never (default: %(default)s)",
    )
    pool.add_argument(
        "--stall-timeout",
        type=float,
        default=defaults.stall_timeout,
        metavar="SECONDS",
        help="recycle a child with requests pending but silent this long; 0 = off (default: %(default)s)",
    )
    pool.add_argument(
        "--liveness-interval",
        type=float,
        default=defaults.liveness_interval,
        metavar="SECONDS",
        help="ping an idle child this often, recycle it if it fails; 0 = off (default: %(default)s)",
    )
    pool.add_argument(
        "--max-children",
        type=int,
        default=0,
        metavar="N",
        help="children at most over all servers and isolation keys; at the cap an idle child of another "
        "pool is stopped to make room, else 503 + Retry-After; 0 = sized to the machine: 16 per CPU or "
        "one per 64 MiB of memory, the smaller, at least 8 (default: %(default)s)",
    )
    pool.add_argument(
        "--child-asks",
        choices=[p.value for p in AskPolicy],
        default=defaults.child_asks.value,
        help="whether the server asks its client (sampling, elicitation, roots) during tools/call, prompts/get "
        "and resources/read, so each such request needs a child to itself for its questions to reach the "
        "right client: auto = once it has asked, and from the start for a legacy child told it may ask for "
        "sampling or elicitation, learned per tool: a tool whose call once ended asking nothing shares "
        "children from then on, one that asked never does; always; never = share children, a question "
        "then reaches a client only when one request is in flight (default: %(default)s)",
    )
    pool.add_argument(
        "--dual-era",
        choices=[d.value for d in DualEra],
        default=DualEra.PER_CLIENT.value,
        help="for a server that speaks both eras: per-client = legacy clients get children opened with "
        "initialize (so tools that ask the legacy way work for them), modern clients children opened with "
        "server/discover; modern = every child opened with server/discover; legacy = every child opened with "
        "initialize, modern clients bridged (their questions become MRTR rounds) (default: %(default)s)",
    )
    pool.add_argument(
        "--isolation",
        choices=[i.value for i in Isolation],
        default=Isolation.SHARED.value,
        help="who may share a child: everyone, one principal, one legacy session (default: %(default)s)",
    )
    pool.add_argument(
        "--principal-header",
        default=None,
        metavar="HEADER",
        help="trust this header (set by an authenticating reverse proxy) as the principal",
    )
    pool.add_argument(
        "--env-from-header",
        action="append",
        default=[],
        metavar="HEADER=ENV",
        help="pass a request header to the child as an environment variable (repeatable); "
        "children are then keyed by the values, never shared across them",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="serve every server of a JSON file in the mcpServers shape, at /servers/NAME/mcp",
    )
    parser.add_argument(
        "--command",
        dest="env_command",
        default=None,
        metavar="COMMAND_LINE",
        help="the stdio server as one string (for MCP_GATEWAY_COMMAND); split like a shell would, never run by one",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="one line per event as human text or JSON (default: %(default)s)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=DRAIN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM, let in-flight requests finish this long (default: %(default)s)",
    )
    parser.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    security = parser.add_argument_group("security")
    security.add_argument(
        "--max-requests-per-principal",
        type=int,
        default=MAX_REQUESTS_PER_PRINCIPAL,
        metavar="N",
        help="requests at once per principal (anonymous clients share one); then 429 (default: %(default)s)",
    )
    security.add_argument(
        "--max-streams-per-principal",
        type=int,
        default=MAX_STREAMS_PER_PRINCIPAL,
        metavar="N",
        help="legacy GET streams open at once per principal; then 429 (default: %(default)s)",
    )
    security.add_argument(
        "--max-sessions-per-principal",
        type=int,
        default=MAX_SESSIONS_PER_PRINCIPAL,
        metavar="N",
        help="legacy sessions one principal may hold per server (anonymous clients share one); then 429 "
        "for its next initialize, and nobody else's session is ended (default: %(default)s)",
    )
    security.add_argument(
        "--max-batch-size",
        type=int,
        default=MAX_BATCH_MESSAGES,
        metavar="N",
        help="messages in one 2025-03-26 JSON-RPC batch; a larger batch gets 400 before any runs "
        "(default: %(default)s)",
    )
    security.add_argument(
        "--auth-token-file",
        default=None,
        metavar="FILE",
        help="bearer tokens, one per line, optionally NAME:TOKEN (NAME becomes the principal); re-read when it changes",
    )
    security.add_argument(
        "--auth-token",
        action="append",
        default=[],
        metavar="[NAME:]TOKEN",
        help="a bearer token (repeatable; prefer the file or MCP_GATEWAY_AUTH_TOKEN)",
    )
    security.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="accept --principal-header only from these client addresses or CIDRs (repeatable)",
    )
    security.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="answer CORS for this browser origin ('*' for any; repeatable)",
    )
    security.add_argument(
        "--oauth-authorization-server",
        action="append",
        default=[],
        metavar="URL",
        help="serve RFC 9728 protected-resource metadata naming this authorization server",
    )
    security.add_argument(
        "--public-url",
        default=None,
        metavar="URL",
        help="the gateway's external base URL (for the protected-resource metadata)",
    )
    oauth = parser.add_argument_group("OAuth access tokens and TLS")
    oauth.add_argument(
        "--oauth-issuer",
        default=None,
        metavar="URL",
        help="accept JWT access tokens from this authorization server (checked against its published keys); "
        "static tokens keep working alongside",
    )
    oauth.add_argument(
        "--oauth-jwks-url",
        default=None,
        metavar="URL",
        help="the issuer's JWKS (default: the jwks_uri of its RFC 8414 or OpenID Connect metadata)",
    )
    oauth.add_argument(
        "--oauth-audience",
        default=None,
        metavar="URL",
        help="the audience tokens must name (default: the endpoint's public URL, --public-url + its path)",
    )
    oauth.add_argument(
        "--oauth-scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="a scope every token must grant, else 403 insufficient_scope (repeatable)",
    )
    oauth.add_argument(
        "--oauth-principal-claim",
        default=DEFAULT_PRINCIPAL_CLAIM,
        metavar="NAME",
        help="the token claim that becomes the principal (default: %(default)s)",
    )
    oauth.add_argument(
        "--tls-cert-file",
        default=None,
        metavar="FILE",
        help="serve HTTPS with this PEM certificate chain; reloaded when it changes",
    )
    oauth.add_argument(
        "--tls-key-file",
        default=None,
        metavar="FILE",
        help="the certificate's PEM private key; reloaded when it changes",
    )
    oauth.add_argument(
        "--tls-client-ca-file",
        default=None,
        metavar="FILE",
        help="require client certificates signed by this CA (mutual TLS); the subject becomes the principal",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (the stdio server to run)")
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Settings:
    parser = build_parser()
    apply_environment(parser, os.environ if environ is None else environ)
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    helptext.warn_misplaced_flags(parser, command)
    if not command and args.env_command:
        command = shlex.split(args.env_command)  # split like a shell would; never run by one
    if command and args.config:
        raise ConfigError("--config", "give either a config file or a command, not both")
    base = server_config(args, tuple(command) if command else demo_command())
    servers = load_servers(args.config, base) if args.config else (base,)
    return Settings(
        servers=servers,
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body_bytes,
        max_stream_seconds=args.max_stream_seconds,
        allowed_origins=tuple(args.allowed_origin),
        allowed_hosts=tuple(args.allowed_host),
        log_level=args.log_level,
        log_format=args.log_format,
        principal_header=args.principal_header,
        trusted_proxies=tuple(args.trusted_proxy),
        auth_token_file=args.auth_token_file,
        auth_tokens=tuple(args.auth_token),
        drain_timeout=args.drain_timeout,
        max_requests_per_principal=args.max_requests_per_principal,
        max_streams_per_principal=args.max_streams_per_principal,
        max_children=args.max_children,
        metrics=not args.no_metrics,
        cors_origins=tuple(args.cors_origin),
        oauth_authorization_servers=tuple(args.oauth_authorization_server),
        public_url=args.public_url,
        state_secret_file=args.state_secret_file,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        tls_client_ca_file=args.tls_client_ca_file,
        advertise_url=args.advertise_url,
        workers=args.workers,
    )


def server_config(args: argparse.Namespace, command: tuple[str, ...]) -> ServerConfig:
    is_demo = command == demo_command()
    for name in args.client_capability:  # argparse checks choices on the command line, not in env values
        if name not in (*CLIENT_CAPABILITIES, NO_CAPABILITY):
            raise ConfigError(
                "--client-capability", f"{name!r} is not one of {', '.join((*CLIENT_CAPABILITIES, NO_CAPABILITY))}"
            )
    if NO_CAPABILITY in args.client_capability and len(set(args.client_capability)) > 1:
        raise ConfigError("--client-capability", "'none' cannot be combined with a capability")
    if args.max_batch_size < 1:
        raise ConfigError("--max-batch-size", "must be at least 1")
    spec = ChildSpec(
        command=command[0],
        args=command[1:],
        max_line_bytes=args.max_line_bytes,
        probe_timeout=args.probe_timeout,
        handshake_timeout=args.startup_timeout,
        request_timeout=args.request_timeout or None,
        input_timeout=args.input_timeout,
        client_capabilities=(
            {name: {} for name in args.client_capability if name != NO_CAPABILITY} if args.client_capability else None
        ),
        roots=tuple(parse_root(root, "--root") for root in args.root) or None,
        name="demo" if is_demo else "",
    )
    return ServerConfig(
        name="demo" if is_demo else "default",
        spec=spec,
        pool=pool_settings(args),
        isolation=Isolation(args.isolation),
        env_from_headers=env_mappings(args.env_from_header),
        max_sessions_per_principal=args.max_sessions_per_principal,
        max_batch_size=args.max_batch_size,
        dual_era=DualEra(args.dual_era),
        oauth=oauth_policy(args),
    )


def oauth_policy(args: argparse.Namespace) -> OAuthPolicy | None:
    if not args.oauth_issuer:
        for flag in ("jwks_url", "audience", "scope"):
            if getattr(args, f"oauth_{flag}"):
                raise ConfigError(f"--oauth-{flag.replace('_', '-')}", "only means something with --oauth-issuer")
        return None
    return OAuthPolicy(
        issuer=args.oauth_issuer,
        jwks_url=args.oauth_jwks_url or None,
        audience=args.oauth_audience or None,
        scopes=tuple(args.oauth_scope),
        principal_claim=args.oauth_principal_claim,
    )


ENV_PREFIX = "MCP_GATEWAY_"


def env_name(option: str) -> str:
    """``--pool-min`` ↔ ``MCP_GATEWAY_POOL_MIN``."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def apply_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Defaults from ``MCP_GATEWAY_*`` variables; flags on the command line still win.
    Repeatable flags take comma-separated values; switches take 1/true/yes/on."""
    for action in parser._actions:  # argparse has no public walk over its actions
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or longs[0] in NOT_SETTINGS:
            continue
        value = environ.get(env_name(longs[0]))
        if value is None:
            continue
        if isinstance(action, argparse._AppendAction):
            action.default = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(action, argparse._StoreTrueAction):
            action.default = value.strip().lower() in ("1", "true", "yes", "on")
        else:
            action.default = value  # argparse applies the option's type to string defaults


def pool_settings(args: argparse.Namespace) -> PoolSettings:
    maximum = args.pool_max if args.pool_max is not None else max(1, args.pool_min)
    try:
        return PoolSettings(
            min_size=args.pool_min,
            max_size=maximum,
            max_in_flight=args.max_in_flight,
            queue_timeout=args.queue_timeout,
            idle_timeout=args.idle_timeout,
            max_requests=args.max_requests,
            max_age=args.max_age,
            stall_timeout=args.stall_timeout,
            liveness_interval=args.liveness_interval,
            child_asks=AskPolicy(args.child_asks),
        )
    except ValueError as exc:
        raise ConfigError("pool", str(exc)) from exc


def env_mappings(items: Sequence[str]) -> dict[str, str]:
    mappings: dict[str, str] = {}
    for item in items:
        header, sep, env = item.partition("=")
        if not sep or not header.strip() or not env.strip():
            raise ConfigError("--env-from-header", f"{item!r} is not HEADER=ENV_VAR")
        mappings[header.strip().lower()] = env.strip()
    return mappings


SUBCOMMANDS = frozenset({"call", "inspect"})


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:])
    from gateway import server  # imported late: --help and --version stay fast

    try:
        settings = parse_settings(argv)
        settings.state_secret()  # an unreadable or short key file fails here, not at the first MRTR round
        app = server.build_app(settings)  # tokens and proxy addresses are checked here, before binding
    except ConfigError as exc:
        print(f"mcp-stdio-gateway: {exc.message}", file=sys.stderr)
        return 2
    return server.run(settings, app)


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    # Imported late, like the server: each subcommand pulls in only what it needs.
    if name == "call":
        from gateway.tools.call import command

        return command.main(argv)
    from gateway.tools import inspect as inspect_cli

    return inspect_cli.main(argv)
