"""A `datasets.save_to_disk` folder read without trusting it: its JSON files (dataset_dict.json, dataset_info.json,
state.json) are checked for the shape `datasets` reads before it reads them, every .arrow file state.json lists must
be a regular file inside the folder, and a file `datasets` or pyarrow still can't read (a truncated .arrow) is named.
Each fault is one DataError naming the file, never a traceback from inside `datasets`."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from crosstune.data.bad_input import DataError
from crosstune.untrusted_files import UnreadableFile, read_json

DATASET_DICT, INFO, STATE = "dataset_dict.json", "dataset_info.json", "state.json"
HINT = "save it again with datasets' save_to_disk, or point data.sources at the original files"
# state.json keys `datasets` reads, with the JSON types it expects (None: null allowed)
STATE_TYPES: dict[str, tuple[type | None, ...]] = {
    "_data_files": (list,), "_fingerprint": (str, None), "_format_columns": (list, None), "_format_kwargs": (dict,),
    "_format_type": (str, None), "_output_all_columns": (bool,), "_split": (str, None),
}  # fmt: skip


def read_hf_disk(path: Path, split: str) -> list[dict]:
    """The rows of `split` of the save_to_disk folder `path` (a Dataset, or a DatasetDict holding that split)."""
    import datasets
    import pyarrow as pa

    folder = _split_folder(Path(path), split)
    arrows = _check_dataset_folder(folder)
    try:
        return datasets.load_from_disk(os.fspath(folder)).to_list()
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        bad = next((f for f in arrows if _arrow_problem(f)), None)
        if bad is not None:
            raise DataError(str(bad), f"not a readable Arrow file ({_arrow_problem(bad)})", hint=HINT) from None
        raise DataError(
            str(folder), f"datasets can't load this save_to_disk folder ({type(e).__name__}: {e})", hint=HINT
        ) from None


def _read_json(file: Path) -> Any:
    if not file.is_file():
        raise DataError(str(file), "missing (or not a regular file)", hint=HINT)
    try:
        return read_json(file)
    except UnreadableFile as e:
        raise DataError(f"{e.where}:{e.line}" if e.line else e.where, e.reason, hint=HINT) from None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _split_folder(path: Path, split: str) -> Path:
    if not (path / DATASET_DICT).exists():
        return path
    splits = _read_json(path / DATASET_DICT)
    names = splits.get("splits") if isinstance(splits, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) and n and "/" not in n for n in names):
        raise DataError(
            str(path / DATASET_DICT), f"`splits` must be a list of split names, not {_kind(names)}", hint=HINT
        )
    if split not in names:
        raise DataError(str(path), f"DatasetDict has no split {split!r} (it has {', '.join(names)})")
    return path / split


def _check_dataset_folder(folder: Path) -> list[Path]:
    """The .arrow files of a Dataset folder, after its dataset_info.json and state.json are checked."""
    info = _read_json(folder / INFO)
    if not isinstance(info, dict):
        raise DataError(str(folder / INFO), f"must be a JSON object, not {_kind(info)}", hint=HINT)
    if not isinstance(info.get("features"), dict | None):
        raise DataError(str(folder / INFO), f"`features` must be an object, not {_kind(info['features'])}", hint=HINT)
    state = _read_json(folder / STATE)
    if not isinstance(state, dict):
        raise DataError(str(folder / STATE), f"must be a JSON object, not {_kind(state)}", hint=HINT)
    for key, types in STATE_TYPES.items():
        value = state.get(key)
        if key in state and not any(value is None if t is None else type(value) is t for t in types):
            raise DataError(
                str(folder / STATE),
                f"`{key}` must be {' or '.join(_kind_name(t) for t in types)}, not {_kind(value)}",
                hint=HINT,
            )
    arrows = []
    for i, entry in enumerate(state.get("_data_files") or []):
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or ".." in PurePosixPath(name).parts or name.startswith("/"):
            raise DataError(
                str(folder / STATE), f"`_data_files[{i}]` must be {{filename: a file in the folder}}", hint=HINT
            )
        arrow = folder / name
        if not arrow.is_file():
            raise DataError(str(arrow), f"listed in {STATE} but missing (or not a regular file)", hint=HINT)
        arrows.append(arrow)
    if not arrows:
        raise DataError(str(folder / STATE), "`_data_files` lists no .arrow file", hint=HINT)
    return arrows


def _kind_name(t: type | None) -> str:
    return "null" if t is None else {list: "a list", dict: "an object", str: "a string", bool: "a boolean"}[t]


def _arrow_problem(file: Path) -> str | None:
    """Why pyarrow can't read `file` as the Arrow stream save_to_disk writes, or None."""
    import pyarrow as pa

    try:
        with pa.memory_map(os.fspath(file)) as source:
            pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError, ValueError) as e:
        return str(e)
    return None
