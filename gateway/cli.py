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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway import __version__, helptext
from gateway.config import Settings
from gateway.configfile import load_servers
from gateway.errors import ConfigError
from gateway.helptext import NOT_SETTINGS
from gateway.oauth.validation import OAuthPolicy
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.roots import parse_root
from gateway.relay.router import DualEra, Isolation, ServerConfig
from gateway.settings import (
    BY_FLAG,
    CLIENT_CAPABILITIES,
    GATEWAY_WIDE,
    NO_CAPABILITY,
    PER_SERVER,
    SETTINGS,
    Setting,
    demo_command,
    env_name,
)
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec

__all__ = ["build_parser", "env_name", "main", "parse_settings"]

AddArgument = Callable[..., argparse.Action]
"""A parser's or an argument group's ``add_argument``."""


def build_parser() -> argparse.ArgumentParser:
    """The serve command line, one option per declared setting, in ``--help-all`` order."""
    parser = helptext.BriefHelpParser(
        prog="mcp-stdio-gateway",
        usage=helptext.MAIN_USAGE,
        description=helptext.MAIN_DESCRIPTION,
        epilog=helptext.MAIN_EPILOG,
        formatter_class=helptext.formatter(env_name),
        brief=NOT_SETTINGS | {s.flag for s in SETTINGS if s.brief},
    )
    parser.add_argument("--help-all", action=helptext.HelpAllAction)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sections: dict[str, AddArgument] = {"": parser.add_argument}
    for setting in SETTINGS:
        if setting.section not in sections:
            sections[setting.section] = parser.add_argument_group(setting.section).add_argument
        add_option(sections[setting.section], setting)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (the stdio server to run)")
    return parser


def add_option(add_argument: AddArgument, setting: Setting) -> None:
    options: dict[str, Any] = {"dest": setting.name, "help": setting.help}
    if setting.kind is bool:
        add_argument(setting.flag, action="store_true", **options)
        return
    options.update(default=setting.default, metavar=setting.metavar, choices=setting.choices)
    if setting.repeat:
        options.update(action="append", default=[])
    elif setting.kind is not str:
        options["type"] = setting.kind
    add_argument(setting.flag, **options)


def environment_defaults(environ: Mapping[str, str]) -> dict[str, object]:
    """Defaults from ``MCP_GATEWAY_*`` variables (by setting name); flags on the command line
    still win. Repeatable settings take comma-separated values; switches take 1/true/yes/on;
    other values stay strings, which argparse converts (and reports) like a flag's."""
    defaults: dict[str, object] = {}
    for setting in SETTINGS:
        value = environ.get(setting.env)
        if value is None:
            continue
        if setting.repeat:
            defaults[setting.name] = [v.strip() for v in value.split(",") if v.strip()]
        elif setting.kind is bool:
            defaults[setting.name] = value.strip().lower() in ("1", "true", "yes", "on")
        else:
            defaults[setting.name] = value
    return defaults


def parse_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Settings:
    parser = build_parser()
    parser.set_defaults(**environment_defaults(os.environ if environ is None else environ))
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    helptext.warn_misplaced_flags(BY_FLAG, command)
    if not command and args.env_command:
        command = shlex.split(args.env_command)  # split like a shell would; never run by one
    if command and args.config:
        raise ConfigError("--config", "give either a config file or a command, not both")
    base = server_config(args, tuple(command) if command else demo_command())
    servers = load_servers(args.config, base) if args.config else (base,)
    values: dict[str, Any] = {}
    for setting in GATEWAY_WIDE:
        value = getattr(args, setting.name)
        values[str(setting.field)] = not value if setting.negate else tuple(value) if setting.repeat else value
    return Settings(servers=servers, **values)


def server_config(args: argparse.Namespace, command: tuple[str, ...]) -> ServerConfig:
    """The command line's server (also the base of every ``--config`` server)."""
    for setting in PER_SERVER:
        problem = setting.problem(getattr(args, setting.name))
        if problem is not None:
            raise ConfigError(setting.flag, problem)
    is_demo = command == demo_command()
    for name in args.client_capability:  # argparse checks choices on the command line, not in env values
        if name not in (*CLIENT_CAPABILITIES, NO_CAPABILITY):
            raise ConfigError(
                "--client-capability", f"{name!r} is not one of {', '.join((*CLIENT_CAPABILITIES, NO_CAPABILITY))}"
            )
    if NO_CAPABILITY in args.client_capability and len(set(args.client_capability)) > 1:
        raise ConfigError("--client-capability", "'none' cannot be combined with a capability")
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
