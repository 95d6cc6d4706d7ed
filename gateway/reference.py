"""The configuration reference, generated from the argument parser so it cannot drift.

``python -m gateway.reference`` prints docs/configuration.md; ``--check`` exits 1 when the
file differs (a test runs the check, so CI fails on a stale reference). Each row: flag,
environment variable, config-file key (for settings a server in ``--config`` may override),
default, meaning — all read from the parser and from ``configfile.FLAG_KEYS``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.cli import build_parser, env_name
from gateway.configfile import FLAG_KEYS
from gateway.helptext import NOT_SETTINGS

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

INTRO = """# Configuration reference

Generated from the code by `python -m gateway.reference` (CI fails when this file is stale).
Every flag can also be set by its environment variable (repeatable flags take comma-separated
values; switches take `1`/`true`/`yes`/`on`); a flag on the command line wins. The config-file
key is the per-server key in a `--config` file (`{"mcpServers": {"NAME": {...}}}`), where the
command line's value is the default for every server.
"""


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default in (None, [], ""):
        return "—"
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default))
    text = text.split(" (default:")[0]
    if action.choices:
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return text.replace("|", "\\\\|")


def render() -> str:
    parser = build_parser()
    rows = ["| flag | environment variable | config-file key | default | meaning |", "|---|---|---|---|---|"]
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or longs[0] in NOT_SETTINGS:
            continue
        flag = longs[0]
        metavar = f" {action.metavar}" if action.metavar and action.nargs != 0 else ""
        key = f"`{FLAG_KEYS[flag]}`" if flag in FLAG_KEYS else "—"
        cells = [f"`{flag}{metavar}`", f"`{env_name(flag)}`", key, _default(action), _help(action)]
        rows.append("| " + " | ".join(cells) + " |")
    rows.append(
        "| `-- COMMAND ARGS…` | `MCP_GATEWAY_COMMAND` | `command`, `args` | the demo server | the stdio server to run |"
    )
    return INTRO + "\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is stale: run python -m gateway.reference --write", file=sys.stderr)
            return 1
        return 0
    if "--write" in argv:
        DOC.write_text(text)
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
