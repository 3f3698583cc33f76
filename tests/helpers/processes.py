"""Starting a CLI child as a user's terminal would."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """preexec_fn for a child that is sent Ctrl-C: a shell starts background jobs (a CI runner's too) with SIGINT
    ignored, the child would inherit that and Python would never raise KeyboardInterrupt; a terminal's Ctrl-C
    reaches a process whose SIGINT is at its default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
