"""The command line: ``tokmon run | demo | sim | replay | report | export``."""

from tokmon.cli.commands import main

__all__ = ["main"]
