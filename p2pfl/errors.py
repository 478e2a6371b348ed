"""User-facing errors: each ends a CLI run with exit status 2 and one line."""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "TopologyError", "DataError"]


class UserError(Exception):
    """A mistake the user can fix (bad YAML, missing file, bad value).

    The message is one line that names what to fix; the CLI prints it
    without a traceback and exits with status 2.
    """


class ConfigError(UserError):
    """Invalid scenario or topology configuration."""


class TopologyError(UserError):
    """A topology that cannot be built (bad arguments, disconnected graph)."""


class DataError(UserError):
    """A dataset that cannot be loaded or partitioned as asked."""
