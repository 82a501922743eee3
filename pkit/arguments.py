"""The argument parser of pkit's commands.

Example:
    >>> parser = OneLineParser(prog="pkit demo")
    >>> _ = parser.add_argument("--n", type=int)
    >>> parser.parse_args(["--n", "x"])
    Traceback (most recent call last):
    ...
    SystemExit: 2
"""
from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit 2 (`pkit eval: error: ...`), without the
    usage block argparse prints first; `--help` still shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")
