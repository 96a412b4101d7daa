"""Exceptions that carry a user-facing message naming the key or file at fault."""


class DecodegapError(Exception):
    """Base class: anything the user can fix from the message alone."""


class ConfigError(DecodegapError):
    """A config file or key is missing, misspelled or out of range."""


class CellNotPossible(DecodegapError):
    """An expected failure: the cell cannot run here (no CUDA graphs on a CPU, no kernel for a
    backend, out of memory). It becomes an invalid session record, not a crash."""


class SessionExists(DecodegapError):
    """A session file already exists with different content; sessions are immutable."""


class RawFileError(DecodegapError):
    """A raw session file is corrupt, truncated or of a foreign schema."""
