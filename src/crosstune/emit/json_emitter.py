"""The JSON emitter: a value as JSON text by the json module's encoder (nothing of ours between the value and the
text). JSON strings hold no raw line break or control character, so no value can add a key or an entry; what JSON
can't hold (NaN, infinities, keys that are not strings, other types) is EmitError before anything is written, never
a file another reader takes differently."""

from __future__ import annotations

import json
from typing import Any

from crosstune.emit.yaml_emitter import EmitError
from crosstune.untrusted_files import UnreadableFile, parse_json


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """`value` as JSON text (keys in their order, non-ASCII written as escapes), one line break at the end."""
    try:
        text = json.dumps(value, indent=indent, allow_nan=False, skipkeys=False)
    except (TypeError, ValueError) as e:
        raise EmitError(f"the JSON written would not read back as the value: {e}") from None
    try:
        back = parse_json(text, "<JSON being written>")  # crosstune's one JSON reader, as the yaml emitter's check
    except UnreadableFile as e:
        raise EmitError(f"the JSON written would not read back: {e}") from None
    if back != value:  # an int key or a tuple would come back as something else
        raise EmitError("the JSON written would not read back as the value (a key that is not a string?)")
    return text + "\n"
