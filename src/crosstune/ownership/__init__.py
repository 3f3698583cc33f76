"""The output policy of every command: one manifest shape and one rule.

The rule: a command replaces only files it wrote, which it proves by its manifest (each file listed with its sha256
and size, unchanged); anything else in its way is refused before any work, naming the file. A folder swapped into
place whole (`owned_output`: data prepare, export, bench serve, report, model tiny/build) is in the way entirely; a
command writing beside others' files (`owned_files`: the evaluator and its growing cache) only at its own names.

The shape, one JSON file at the folder's top whose name each command keeps (export_manifest.json, ...):

    {"format": 1, "made_by": "crosstune export", "created": "2025-...+0000",
     "files": {"merged/config.json": {"sha256": "...", "bytes": 1234}, ...},
     ...the command's own fields beside them (export: kind, source; a sweep: endpoint, model, complete)}

plus, while `owned_files` writes, "writing": the names claimed by a run in progress (a kill -9 leaves them: the
next run takes them as its own).

Two more kinds of output keep the same rule with the proof where their command keeps it: a folder resumed in place
rather than swapped (`claim`: a study bundle, a run directory, the demo's folder; its manifest is the command's own
file, bundle.json, run.json, demo.json, read by the command's reader; within it a redo removes only what that
manifest lists, `unlisted`), and a one-file output (`write_owned_file`: a job spec), whose last line carries the
sha256 of the rest.
"""

from crosstune.ownership.manifests import (
    MANIFEST_FORMAT,
    FileEntry,
    OutputKind,
    OutputRefused,
    OwnedManifest,
    changed,
    read_manifest,
    refusal,
    restamp,
    verify,
    write_manifest,
)
from crosstune.ownership.one_file import FileKind, file_refusal, write_owned_file
from crosstune.ownership.outputs import check_out, owned_files, owned_output
from crosstune.ownership.resumed import ResumedKind, claim, unlisted

__all__ = [
    "MANIFEST_FORMAT",
    "FileEntry",
    "FileKind",
    "OutputKind",
    "OutputRefused",
    "OwnedManifest",
    "ResumedKind",
    "changed",
    "check_out",
    "claim",
    "file_refusal",
    "owned_files",
    "owned_output",
    "read_manifest",
    "refusal",
    "restamp",
    "unlisted",
    "verify",
    "write_manifest",
    "write_owned_file",
]
