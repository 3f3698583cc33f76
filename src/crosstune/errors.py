"""The base of every expected failure: the CLI's top-level handler prints it as a message, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def read_json(path: Path, what_to_do: str) -> Any:
    """A JSON file that crosstune or a library wrote; a corrupt one is an InputError naming the file and the fix."""
    try:
        return json.loads(Path(path).read_bytes())
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise InputError(f"{path}: not valid JSON{where} ({reason}): {what_to_do}") from None


def read_model_config(model_dir: Path) -> dict:
    """An HF model folder's config.json, or an InputError saying it is corrupt."""
    return read_json(Path(model_dir) / "config.json", "restore it from the model's source (or rebuild a tiny model)")
