"""User patterns (a LoRA target regex of an imported config, an adapter's rank_pattern and alpha_pattern keys) run
under a bound on their work. Python's `re` backtracks without limit and can't be interrupted: `(.*.*)*q_projX` against
one module name ran for minutes and ignored Ctrl-C. These are compiled by the `regex` module (the same syntax as
`re`, the one PEFT matches with; transformers already depends on it), whose matcher stops at a timeout: a pattern
that needs more than PATTERN_WORK_S for one name is refused in one line, as is one longer than MAX_PATTERN."""

from __future__ import annotations

from collections.abc import Callable

import regex

from crosstune.errors import InputError

MAX_PATTERN = 1000  # characters: a target regex or a module name pattern is a line
PATTERN_WORK_S = 1.0  # seconds of matching one name: a well-formed pattern takes microseconds


class PatternError(InputError):
    """A user's pattern that is not one, is too long, or takes more than its bound of work."""


def user_pattern(text: str, where: str, *, suffix: bool = False) -> Callable[[str], bool]:
    """Whether a name matches the user's pattern `text` (from `where`, named in a refusal): whole, as PEFT matches a
    target_modules string; `suffix`: its last dot-separated parts, as PEFT's rank_pattern / alpha_pattern keys."""
    if not isinstance(text, str) or len(text) > MAX_PATTERN:
        size = f"{len(text):,} characters" if isinstance(text, str) else type(text).__name__
        raise PatternError(f"{where}: a pattern of {size}, not a regular expression of at most {MAX_PATTERN:,}")
    try:
        compiled = regex.compile(rf"(?:.*\.)?(?:{text})" if suffix else text, flags=regex.VERSION0)
    except (regex.error, OverflowError, RecursionError) as e:
        raise PatternError(f"{where}: {text!r} is not a regular expression ({e})") from None

    def matches(name: str) -> bool:
        try:
            return compiled.fullmatch(name, timeout=PATTERN_WORK_S) is not None
        except TimeoutError:
            raise PatternError(
                f"{where}: {text!r} took more than {PATTERN_WORK_S:g} s matching {name!r} (nested repeats such as "
                "(a*)* backtrack without end): simplify it, or list the module names"
            ) from None

    return matches
