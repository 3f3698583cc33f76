"""The base of every expected failure: the CLI's top-level handler prints it as a message, never a traceback."""

from __future__ import annotations


class CrosstuneError(Exception):
    """An expected failure. The message says what was wrong, where (file:line, YAML path, tensor) and what to do."""

    exit_code = 1
