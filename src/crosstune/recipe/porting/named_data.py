"""The data a foreign config names: a local file, glob or folder (read against the config's folder, as the tool run
from there would) or a hub dataset id (written hf://OWNER/NAME in the recipe: crosstune.hub's rule), and a peek at
its first record's columns to tell the tools' formats apart (bounded, entering no link: confinement.first_files)."""

from __future__ import annotations

import glob
from pathlib import Path

from crosstune import hub
from crosstune.confinement import first_files
from crosstune.recipe.porting.port import Port
from crosstune.recipe.porting.typed import foreign_hub_id
from crosstune.untrusted_files import jsonl_rows

# Columns of images, audio or video: crosstune trains text (a vision config imports, then fails at `data prepare`)
MEDIA_COLUMNS = ("images", "image", "audios", "audio", "videos", "video")
TEXT_ONLY = "crosstune trains text: images, audio and video are not read"


def text_only(port: Port, key: str, columns: set[str] | None) -> None:
    """A source whose first record has media columns is listed (up front, for --strict) rather than imported."""
    media = sorted(set(columns or ()) & set(MEDIA_COLUMNS))
    if media:
        port.miss(key, f"the data has {', '.join(media)} columns: {TEXT_ONLY}", "a text-only copy of the data")


def config_path(value: str, config_dir: Path) -> Path:
    """A path a foreign config names, read against the config's folder (as its tool run from there would)."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else config_dir / p


def data_path(key: str, value: str, config_dir: Path) -> tuple[str, bool]:
    """(the path a recipe source writes, whether it is a hub id): a local file, glob or folder (config_path), else a
    hub dataset id, written hf://OWNER/NAME."""
    local = config_path(value, config_dir)
    if local.exists() or glob.has_magic(value) or not foreign_hub_id(key, value):
        return str(local.resolve()) if local.exists() else str(local), False
    return hub.hub_ref(value), True


def peek_columns(path: str, is_hub: bool, revision: str | None = None) -> set[str] | None:
    """The column names of a source's first data file (a hub dataset's when cached), to tell TRL's dataset
    formats apart; None when nothing is at hand to read."""
    if is_hub:
        try:
            folder = hub.resolve(path, "dataset", revision, fetch=False).path
        except hub.HubError:
            return None
    else:
        folder = Path(path)
    files = [folder] if folder.is_file() else first_files(folder, hub.files_root(folder)) if folder.is_dir() else []
    for f in files:
        if f.suffix in (".jsonl", ".json") and f.is_file():
            for _, row in jsonl_rows(f):
                if row is not None:
                    return set(row) if isinstance(row, dict) else None
        if f.suffix == ".parquet" and f.is_file():
            import pyarrow.parquet as pq

            return set(pq.read_schema(f).names)
    return None
