"""Read raw records from the recipe's sources: JSONL, Parquet and `datasets.save_to_disk` folders, by path or glob,
and hub datasets by id (the snapshot in the hub cache, read by `datasets` with the source's config and split).

Every record keeps where it came from (`file:line` for JSONL, `file:row N` for tables, `id[split]:row N` for hub
datasets) so errors can point at it.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crosstune import hub
from crosstune.data.bad_input import DataError, Ledger
from crosstune.data.hf_disk import read_hf_disk
from crosstune.recipe.hub_ids import hub_dataset_id
from crosstune.recipe.load import resolve_path
from crosstune.recipe.schema import DataSource, Recipe
from crosstune.untrusted_files import UnreadableFile, jsonl_rows

HF_DISK_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
LENIENT_HINT = "fix the record, or pass --lenient to skip bad records and count them"


@dataclass(frozen=True)
class RawRecord:
    where: str  # "file:line" (JSONL) or "file:row N" (Parquet, save_to_disk)
    row: dict


def source_files(recipe: Recipe, index: int) -> list[tuple[Path, str]]:
    """The (path, format) pairs that `data.sources[index]` names; a glob expands in sorted order."""
    src: DataSource = recipe.data.sources[index]
    where = f"data.sources[{index}].path"
    if (repo := hub_dataset_id(src)) is not None:
        try:  # fetched when online; offline the cache or one line saying how to fetch it
            return [(hub.resolve(repo, "dataset", src.revision).path, "hub")]
        except hub.HubError as e:
            raise DataError(where, str(e)) from None
    pattern = resolve_path(recipe, src.path)
    assert pattern is not None
    if glob.has_magic(str(pattern)):
        paths = [Path(p) for p in sorted(glob.glob(str(pattern)))]
    else:
        paths = [pattern] if pattern.exists() else []
    if not paths:
        raise DataError(where, f"nothing matches {pattern}", hint="a JSONL/Parquet file, a glob, or a save_to_disk dir")
    out: list[tuple[Path, str]] = []
    for path in paths:
        fmt = src.format if src.format != "auto" else _detect_format(path, where)
        if path.is_dir() and fmt in ("jsonl", "parquet"):
            inner = sorted(p for p in path.iterdir() if p.suffix in {s for s, f in SUFFIX_FORMATS.items() if f == fmt})
            if not inner:
                raise DataError(where, f"{path} is a folder with no {fmt} files")
            out += [(p, fmt) for p in inner]
        else:
            out.append((path, fmt))
    for path, _ in out:  # a pipe or a device would block or never end; a source is read twice (hash, then rows)
        if not (path.is_file() or path.is_dir()):
            raise DataError(
                where,
                f"{path} is not a regular file (a pipe, socket or device): it is never read",
                hint="give a JSONL/Parquet file or a save_to_disk folder",
            )
    return out


def _detect_format(path: Path, where: str) -> str:
    if path.is_dir():
        if any((path / m).exists() for m in HF_DISK_MARKERS):
            return "hf_disk"
        raise DataError(where, f"{path} is a folder but not a datasets.save_to_disk directory", hint="set format:")
    if path.suffix in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[path.suffix]
    raise DataError(where, f"cannot tell the format of {path.name}", hint="set format: jsonl, parquet or hf_disk")


def fingerprint(recipe: Recipe) -> list[list]:
    """(path, size, mtime_ns) of every file behind the sources: a changed or replaced file makes preparations stale."""
    out: list[list] = []
    for i in range(len(recipe.data.sources)):
        for path, _ in source_files(recipe, i):
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for f in files:
                st = f.stat()
                out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return out


def read_split(recipe: Recipe, split: str, ledger: Ledger) -> tuple[list[RawRecord], int]:
    """Every readable record of `split`, in source order, and the number of blank JSONL lines passed over."""
    records: list[RawRecord] = []
    blank = 0
    for i, src in enumerate(recipe.data.sources):
        if src.split != split:
            continue
        for path, fmt in source_files(recipe, i):
            if fmt == "jsonl":
                for item in _read_jsonl(path, ledger):
                    if item is None:
                        blank += 1
                    else:
                        records.append(item)
            elif fmt == "parquet":
                records += _read_parquet(path)
            elif fmt == "hub":
                records += _read_hub(src, path, f"data.sources[{i}]")
            else:
                records += _read_hf_disk(path, split)
    return records, blank


def _read_jsonl(path: Path, ledger: Ledger) -> Iterator[RawRecord | None]:
    """Yields a record per line, None per blank line; lines crosstune.untrusted_files refuses go to the ledger (invalid
    UTF-8, not JSON, too long, too deep, too many digits, a duplicate key), each counted by its kind."""
    for line_no, row in jsonl_rows(path):
        where = f"{path}:{line_no}"
        if isinstance(row, UnreadableFile):
            ledger.bad(where, row.kind, row.reason, hint=LENIENT_HINT)
            continue
        if row is None:
            yield None
            continue
        if not isinstance(row, dict):
            ledger.bad(where, "bad_json", f"expected a JSON object, got {type(row).__name__}", hint=LENIENT_HINT)
            continue
        yield RawRecord(where, row)


def _read_parquet(path: Path) -> list[RawRecord]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        hint = "re-export it, or set the source's format: if it is not Parquet"
        raise DataError(str(path), f"not a readable Parquet file ({e})", hint=hint) from None
    return [RawRecord(f"{path}:row {i}", row) for i, row in enumerate(rows, 1)]


def _read_hub(src: DataSource, snapshot: Path, where: str) -> list[RawRecord]:
    """A hub dataset's `hub_split` of its `config`, read by `datasets` from the snapshot folder (its card names each
    config's files). `datasets`' own Arrow cache goes to a temporary folder: the rows are read into memory here."""
    import tempfile

    import datasets

    split = src.hub_split or "train"
    with tempfile.TemporaryDirectory(prefix="crosstune-hub-data-") as cache:
        try:
            table = datasets.load_dataset(str(snapshot), name=src.config, split=split, cache_dir=cache)
        except (ValueError, FileNotFoundError, datasets.exceptions.DatasetGenerationError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(
                where,
                f"hub dataset {src.path} (config {src.config}, split {split}): {reason}",
                hint="set the source's config and hub_split to ones its card lists",
            ) from None
        rows = table.to_list()
    return [RawRecord(f"{src.path}[{split}]:row {i}", row) for i, row in enumerate(rows, 1)]


def _read_hf_disk(path: Path, split: str) -> list[RawRecord]:
    return [RawRecord(f"{path}:row {i}", row) for i, row in enumerate(read_hf_disk(path, split), 1)]
