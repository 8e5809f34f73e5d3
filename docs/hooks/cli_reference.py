"""The command-line reference page, generated at each build from the parser itself.

`reference/cli.md` is not a file in the repository: this hook renders
`agentfsm --help` and every subcommand's help from `build_parser()`, so the
page cannot drift from the command line it describes.
"""

from __future__ import annotations

import argparse
import functools

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from agentfsm.cli.parser import build_parser

PAGE = "reference/cli.md"
WIDTH = 100
"""The help's line width, fixed so the page is the same on every terminal."""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser's subcommands in the order `--help` lists them."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # noqa: SLF001 (argparse keeps its subparsers nowhere public)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser again
                    seen.add(id(sub))
                    found.append((name, sub))
    return found


def _help(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class
    if not (isinstance(formatter, type) and issubclass(formatter, argparse.HelpFormatter)):
        raise TypeError(f"{parser.prog!r} has formatter {formatter!r}, not an `argparse.HelpFormatter`")
    parser.formatter_class = functools.partial(formatter, width=WIDTH)
    return parser.format_help().rstrip()


def _sections(parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"```text\n{_help(parser)}\n```\n"]
    for _name, sub in _subcommands(parser):
        out.append(f"{'#' * level} `{sub.prog}`\n")
        out.extend(_sections(sub, level + 1))
    return out


def render() -> str:
    """The page's markdown: the top-level help, then each command's, nested as the commands are."""
    parser = build_parser()
    head = [
        "# Command line\n",
        "Generated from the parser at each build of this site: what `agentfsm COMMAND --help` prints.\n",
    ]
    return "\n".join(head + _sections(parser, 2))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated page to the site's files."""
    files.append(File.generated(config, PAGE, content=render()))
    return files
