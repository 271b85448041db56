"""Subcommands that live in their own modules, for ``midword`` and ``midword bench``.

Each module exposes ``add_arguments(parser)`` and ``run(args)``; its docstring is the
subcommand's ``--help`` description.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def add_module_command(
    sub: Any, name: str, module_name: str, help_text: str, dest: str
) -> argparse.ArgumentParser:
    """Add ``name`` to the subparsers ``sub``, built by ``module_name``; the module is kept
    in ``args.<dest>``. A module that fails to import gives a command that only says why,
    so one broken command does not take the others down.

    Example:
        >>> parser = argparse.ArgumentParser(prog="x")
        >>> sub = parser.add_subparsers(dest="command")
        >>> _ = add_module_command(sub, "gone", "no.such.module", "missing", "_module")
        >>> sub.choices["gone"].description is None, "unavailable" in sub._choices_actions[0].help
        (True, True)
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return sub.add_parser(name, help=f"{help_text} (unavailable: {exc})")
    cmd = sub.add_parser(
        name,
        help=help_text,
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(cmd)
    cmd.set_defaults(**{dest: module})
    return cmd
