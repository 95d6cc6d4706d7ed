"""Command line: parse arguments into ``Settings`` and hand them to ``server.run``. No logic.

``mcp-stdio-gateway call …`` and ``mcp-stdio-gateway inspect …`` are subcommands, dispatched
on the first argument before the serve parser runs, so ``mcp-stdio-gateway [serve options]
[-- COMMAND …]`` keeps working unchanged.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from gateway import __version__, helptext
from gateway.config import Settings
from gateway.configfile import load_servers
from gateway.errors import ConfigError
from gateway.helptext import NOT_SETTINGS
from gateway.oauth.policy import OAuthPolicy
from gateway.protocol.dispatchstate import PoolSettings
from gateway.relay.server_config import ServerConfig
from gateway.settings import (
    BY_FLAG,
    GATEWAY_WIDE,
    PER_SERVER,
    SETTINGS,
    Setting,
    demo_command,
    env_name,
)
from gateway.settings.declaration import either
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
    """The command line's server (also the base of every ``--config`` server): each per-server
    setting, checked and converted as declared, lands where its ``target`` says."""
    parts: dict[str, dict[str, Any]] = {"spec": {}, "pool": {}, "server": {}, "oauth": {}}
    for setting in PER_SERVER:
        value = getattr(args, setting.name)
        problem = setting.problem(value)
        if problem is None and setting.choices and not setting.repeat and value not in setting.choices:
            problem = f"must be {either(setting.choices)}"  # an environment value: argparse checks flags only
        if problem is not None:
            raise ConfigError(setting.flag, problem)
        owner, _, name = str(setting.target).partition(".")
        parts[owner][name] = setting.converted(value)
    is_demo = command == demo_command()
    spec = ChildSpec(command[0], command[1:], name="demo" if is_demo else "", **parts["spec"])
    return ServerConfig(
        name="demo" if is_demo else "default",
        spec=spec,
        pool=pool_settings(parts["pool"]),
        oauth=oauth_policy(parts["oauth"]),
        **parts["server"],
    )


def pool_settings(values: dict[str, Any]) -> PoolSettings:
    if values["max_size"] is None:  # --pool-max defaults to --pool-min, at least 1
        values["max_size"] = max(1, values["min_size"])
    try:
        return PoolSettings(**values)
    except ValueError as exc:
        raise ConfigError("--pool-min/--pool-max", str(exc)) from exc


def oauth_policy(values: dict[str, Any]) -> OAuthPolicy | None:
    if not values["issuer"]:
        for name in ("jwks_url", "audience", "scopes"):
            if values[name]:
                flag = "--oauth-scope" if name == "scopes" else f"--oauth-{name.replace('_', '-')}"
                raise ConfigError(flag, "only means something with --oauth-issuer")
        return None
    for name in ("jwks_url", "audience"):
        values[name] = values[name] or None  # an empty environment value: not given
    return OAuthPolicy(**values)


SUBCOMMANDS = frozenset({"call", "inspect"})
SUBCOMMAND_LIKENESS: Final = 0.6
"""How alike (``difflib`` ratio) a first word must be to a subcommand to be taken for a typo
of it: ``cal``, ``inpsect``, ``calll`` are; ``npx``, ``node``, ``uvx``, ``python`` are not."""


def mistyped_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand a bare first word (no ``--`` before it, not a flag) looks like a typo
    of, or None. ``mcp-stdio-gateway cal URL`` would otherwise serve a program named ``cal``."""
    if not argv or argv[0].startswith("-") or argv[0] in SUBCOMMANDS:
        return None
    close = difflib.get_close_matches(argv[0], sorted(SUBCOMMANDS), n=1, cutoff=SUBCOMMAND_LIKENESS)
    return close[0] if close else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:])
    meant = mistyped_subcommand(argv)
    if meant is not None:
        print(
            f"mcp-stdio-gateway: unknown command {argv[0]!r}; did you mean `{meant}`? "
            f"(to serve a program named {argv[0]}, put -- before it: mcp-stdio-gateway -- {argv[0]} …)",
            file=sys.stderr,
        )
        return 2
    try:
        settings = parse_settings(argv)  # --help, --version and a bad flag exit here
        settings.state_keys()  # a key file unreadable or no keyring fails here, not at the first MRTR round
        from gateway import server  # imported once parsed: --help loads no Starlette, uvicorn or httpx

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
