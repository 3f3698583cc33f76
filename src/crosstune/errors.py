"""The base of every expected failure: the CLI's top-level handler prints it as a message, never a traceback."""

from __future__ import annotations

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class CrosstuneError(Exception):
    """An expected failure. The message says what was wrong, where (file:line, YAML path, tensor) and what to do."""

    exit_code = 1


class Interrupted(CrosstuneError):
    """Ctrl-C during a long command; the message says what was saved and the command that resumes."""

    exit_code = EXIT_INTERRUPTED


class BatchPlanError(CrosstuneError, ValueError):
    """The recipe's batch (per-device rows × devices × accumulation) needs more rows than the prepared data holds."""


BATCH_HINT = "lower train.per_device_batch_size or train.grad_accumulation, or add training data"


class InputError(CrosstuneError):
    """A file or folder given to crosstune is missing, unreadable or of the wrong kind."""
