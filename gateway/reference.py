"""The configuration reference, generated from the settings' declarations so it cannot drift.

``python -m gateway.reference`` prints docs/configuration.md; ``--check`` exits 1 when the
file differs (a test runs the check, so CI fails on a stale reference). Each row: flag,
environment variable, config-file key (for settings a server in ``--config`` may override),
default, meaning — all read from ``gateway.settings.SETTINGS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.settings import SETTINGS, Setting

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

INTRO = """# Configuration reference

Generated from the code by `python -m gateway.reference` (CI fails when this file is stale).
Every flag can also be set by its environment variable (repeatable flags take comma-separated
values; switches take `1`/`true`/`yes`/`on`); a flag on the command line wins. The config-file
key is the per-server key in a `--config` file (`{"mcpServers": {"NAME": {...}}}`), where the
command line's value is the default for every server. What the log writes with `--log-format`,
`--log-level` and `--child-stderr-log`, field by field: [operations](operations.md#logs).
"""


def _default(setting: Setting) -> str:
    if setting.kind is bool:
        return "off"
    if setting.repeat or setting.default in (None, ""):
        return "—"
    return f"`{setting.default}`"


def _help(setting: Setting) -> str:
    text = setting.help.replace("%(default)s", str(setting.default))
    text = text.split(" (default:")[0]
    if setting.choices:
        text += f" (one of: {', '.join(setting.choices)})"
    return text.replace("|", "\\\\|")


def render() -> str:
    """One table per ``--help`` section, in its order."""
    header = ["| flag | environment variable | config-file key | default | meaning |", "|---|---|---|---|---|"]
    tables: dict[str, list[str]] = {}
    for setting in SETTINGS:
        metavar = f" {setting.metavar}" if setting.metavar and setting.kind is not bool else ""
        key = f"`{setting.key}`" if setting.key else "—"
        cells = [f"`{setting.flag}{metavar}`", f"`{setting.env}`", key, _default(setting), _help(setting)]
        tables.setdefault(setting.section, list(header)).append("| " + " | ".join(cells) + " |")
    tables[""].append(
        "| `-- COMMAND ARGS…` | `MCP_GATEWAY_COMMAND` | `command`, `args` | the demo server | the stdio server to run |"
    )
    parts = [
        f"## {section[:1].upper() + section[1:] or 'Serving'}\n\n" + "\n".join(rows) for section, rows in tables.items()
    ]
    return INTRO + "\n" + "\n\n".join(parts) + "\n"


USAGE = """usage: python -m gateway.reference [--check | --write]

Print the configuration reference (docs/configuration.md), generated from the settings.
  --check   exit 1 when docs/configuration.md differs from what the settings generate
  --write   rewrite docs/configuration.md
  --help    show this help and exit
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(USAGE, end="")
        return 0
    unknown = [arg for arg in argv if arg not in ("--check", "--write")]
    if unknown:
        print(f"{USAGE}\nerror: unknown argument {unknown[0]!r}", file=sys.stderr)
        return 2
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
