"""The demo's context (what every stage reads and adds to) and the output folder it owns."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from crosstune.errors import InputError

console = Console()
DEFAULT_TRAIN, DEFAULT_EVAL = 600, 60  # LoRA records and held-out problems (15 per held-out family)
# Written into --out when the demo makes it: the demo only ever empties a folder that carries it.
DEMO_MARKER = ".crosstune-demo"


@dataclass
class DemoContext:
    out: Path
    recipe_file: Path
    seed: int
    n_train: int
    n_eval: int
    steps: int | None = None  # LoRA steps for both backends; None keeps the recipe's train.max_steps
    cache_root: Path | None = None  # where the pretrained base is cached (default: see crosstune.pretrain.base_model)
    base_steps: int | None = None  # pretraining steps of the base; None keeps PretrainConfig's
    made: list[tuple[str, Path, str]] = field(default_factory=list)  # (what, where, note)
    scores: list = field(default_factory=list)  # demo.evaluation.ModelScore per evaluated model
    report: Path | None = None

    @property
    def corpus_dir(self) -> Path:
        return self.out / "corpus"

    @property
    def model_dir(self) -> Path:
        return self.out / "models" / "base-gemma4"

    def overrides(self) -> list[str]:
        """Point the embedded recipe at this demo's outputs, wherever --out is."""
        return [
            f"model.path={self.model_dir}",
            f"data.sources=[{{path: {self.corpus_dir / 'train.jsonl'}}}]",
            f"output_dir={self.out / 'runs'}",
            f"eval.problems={self.corpus_dir / 'eval'}",
            *([f"train.max_steps={self.steps}"] if self.steps else []),
        ]


def claim_output_folder(out: Path) -> None:
    """Make `out` an empty folder that carries the demo marker. Only a folder an earlier demo made (its marker) is
    emptied; anything else that is not empty is refused, so `--out .` or `--out ~` never deletes a user's files."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file: give the demo a folder (it is created if missing)")
    if out.is_dir() and any(out.iterdir()):
        if not (out / DEMO_MARKER).is_file():
            raise InputError(
                f"--out {out} is not empty and was not made by `crosstune demo` (no {DEMO_MARKER} in it): the demo "
                "replaces its folder's contents on every run, so give it a new or empty folder, e.g. --out demo-out"
            )
        for child in out.iterdir():  # the contents only: the folder itself may be the working directory
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("made by `crosstune demo`, which empties this folder on its next run\n")
