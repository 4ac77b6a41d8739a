"""`causeway` imports only the module of the command it runs, and reads the same either way."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from deploy import cli


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(action.dest, action.help) for action in subparsers._choices_actions]


def test_placeholders_carry_the_help_lines_the_modules_give() -> None:
    # The lazy table repeats each module's help line; a module that changes its line fails here.
    assert _commands(cli.build_parser("")) == _commands(cli.build_parser())
    assert cli.build_parser("").format_help() == cli.build_parser().format_help()


@pytest.mark.parametrize("command", ["up", "status", "down", "topics", "produce", "consume", "topology", "wan"])
def test_a_command_gets_its_own_parser_from_its_module(command: str) -> None:
    lazy = cli.build_parser(command)
    full = cli.build_parser()
    assert _subparser(lazy, command).format_help() == _subparser(full, command).format_help()
    assert _subparser(lazy, command)._defaults.keys() == _subparser(full, command)._defaults.keys()


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = subparsers.choices[name]
    return sub


def test_help_imports_neither_trio_nor_the_protocol() -> None:
    probe = (
        "import sys\n"
        "from deploy.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('trio', 'broker.protocol.messages', 'broker.client', 'topology', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m in heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "causeway" in done.stdout  # the help itself was printed
