"""How ``--help`` is laid out, for the gateway and its subcommands; the main help's texts.

argparse's own formatter wraps with ``textwrap``'s defaults, which break words at hyphens
(``mcp-\\nstdio-gateway``, ``--pool-\\nmin``): copy-paste of a name or flag from the help
then fails. This formatter wraps at spaces only (a word longer than the line stays whole),
caps the width so lines stay readable on wide terminals, and, given an ``env_name``
function, ends each option's help with the environment variable that sets it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Collection, Sequence
from typing import Final

MAX_WIDTH: Final = 100
"""Help lines wrap at the terminal's width, at most this many columns (readability)."""
HELP_POSITION: Final = 32
"""The column where option help starts (argparse's default of 24 wraps most of our flags)."""


MAIN_USAGE: Final = """mcp-stdio-gateway [OPTIONS] [-- COMMAND ARGS...]    serve COMMAND
       mcp-stdio-gateway call URL TOOL [--arg KEY=VALUE]  call a tool
       mcp-stdio-gateway inspect -- COMMAND ARGS...       what a server offers

Arguments after COMMAND go to the server, not the gateway: put OPTIONS first."""
MAIN_DESCRIPTION: Final = (
    "Serve a stdio MCP server (without COMMAND: a built-in demo) over Streamable HTTP, for modern "
    "(2026-07-28) and legacy clients. Example: mcp-stdio-gateway --port 8000 -- npx -y "
    "@modelcontextprotocol/server-everything. call and inspect have their own --help."
)
MAIN_EPILOG: Final = (
    "Every option can also be set by the environment variable in brackets; repeatable options "
    "take comma-separated values there. The full reference is docs/configuration.md."
)
NOT_SETTINGS: Final = frozenset({"--help", "--help-all", "--version"})
"""Flags that print and exit: no environment variable, no reference row."""


class HelpFormatter(argparse.HelpFormatter):
    """Wraps at spaces only; never breaks a name at a hyphen."""

    env_name: Callable[[str], str] | None = None

    def __init__(self, prog: str) -> None:
        width = min(shutil.get_terminal_size().columns, MAX_WIDTH) - 2
        super().__init__(prog, max_help_position=HELP_POSITION, width=width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = re.sub(r"\s+", " ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [re.sub(r"\s+", " ", p).strip() for p in text.split("\n\n")]
        return "\n\n".join(
            textwrap.fill(
                p,
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=False,
            )
            for p in paragraphs
            if p
        )

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = type(self).env_name
        if text and name is not None and longs and longs[0] not in NOT_SETTINGS:
            text += f" [{name(longs[0])}]"
        return text


def formatter(env_name: Callable[[str], str]) -> type[HelpFormatter]:
    """A ``HelpFormatter`` that names each option's environment variable."""
    return type("EnvHelpFormatter", (HelpFormatter,), {"env_name": staticmethod(env_name)})


class BriefHelpParser(argparse.ArgumentParser):
    """``--help`` shows the options most people need, in full, and names the rest in one
    paragraph; ``--help-all`` (``HelpAllAction``) shows every option in full."""

    def __init__(self, *args: object, brief: frozenset[str] = frozenset(), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.brief = brief
        self.show_all = not brief

    def _is_brief(self, action: argparse.Action) -> bool:
        return not action.option_strings or any(o in self.brief for o in action.option_strings)

    def format_help(self, formatter: argparse.HelpFormatter | None = None) -> str:
        """(Python 3.15 passes the formatter it made for the output, coloured for a terminal;
        earlier Pythons pass none.)"""
        if self.show_all:
            return super().format_help()
        if formatter is None:
            formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        formatter.start_section("common options")
        formatter.add_arguments([a for a in self._actions if a.option_strings and self._is_brief(a)])
        formatter.end_section()
        rest = [a.option_strings[-1] for a in self._actions if a.option_strings and not self._is_brief(a)]
        formatter.start_section("more options (mcp-stdio-gateway --help-all shows them in full)")
        formatter.add_text(", ".join(rest))
        formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()


class HelpAllAction(argparse.Action):
    """``--help-all``: every option in full, then exit."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        kwargs.setdefault("help", "show every option in full and exit")
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        if isinstance(parser, BriefHelpParser):
            parser.show_all = True
        parser.print_help()
        parser.exit()


def warn_misplaced_flags(ours: Collection[str], command: Sequence[str]) -> None:
    """Warn about arguments after the server command that are the gateway's own flags
    (``ours``): they go to the server (as they must), which is rarely what was meant."""
    for arg in command[1:]:
        flag = arg.split("=", 1)[0]
        if flag in ours and flag not in NOT_SETTINGS:
            print(
                f"mcp-stdio-gateway: warning: {flag} comes after the server command, so it goes to the server; "
                "put gateway options before the command (or before --)",
                file=sys.stderr,
            )
