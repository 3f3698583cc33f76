"""The package's structure, checked on the import graph of src/crosstune (every import counts: module level, inside a
function, under TYPE_CHECKING; tests/helpers/import_graph.py reads it).

- One layer is one folder (or a top-level module); imports go to the same layer or a lower one (LAYERS, lowest
  first: README's "Repository map" lists the same folders in the same order, checked below). Inside a folder that
  holds rooms of its own (SUBLAYERS: evals/), its rooms import only downward too, and the folder's own
  modules (its face, cli.py, evals' runner) stand above them.
- Two layers kept apart (APART) import nothing of each other: the serving bench talks HTTP to any endpoint.
- No import cycles between modules, nor between top-level folders.
- The two backends are reached only through crosstune.train: nothing else imports crosstune.train.torch or
  crosstune.train.jax, and neither backend imports the other or the other's stack.
- A package's modules don't import another package's private (_underscored) names.
- Each area's CLI module (one named `cli` or `*_cli`, and doctor) exposes `register(app)`, which crosstune.commands
  calls; no other module imports a CLI module (crosstune.cli starts the assembly): what a CLI module holds besides
  its commands is reachable by no other code path.
- bench/*.py stand above every layer under the same rules: no backend module (crosstune.train's public face:
  train.parts), no private name, no CLI module.

File names (one role each) are checked by tests/test_module_names.py, the tests' own imports by
tests/test_test_modules.py, what train/ and export/ may know of a backend by tests/test_backend_boundaries.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.import_graph import cycles, import_graph, imports_of, modules, package_imports
from tests.helpers.paths import REPO

SRC = REPO / "src"
README = REPO / "README.md"

# Lowest first: (folder or top-level module, what it holds). The README's map is checked against this list.
LAYERS: list[tuple[str, str]] = [
    ("errors", "the expected-failure base class"),
    ("units", "memory units and their conversions: GB (chips' HBM, the planner) and GiB (what runs measure)"),
    ("bounds", "numbers checked where they enter: type, finite, range"),
    ("confinement", "paths under a root the user named stay in it: no link out, no walk or delete through a link"),
    ("patterns", "user patterns (target regexes, rank_pattern keys) matched under a bound on their work"),
    ("untrusted_files", "every JSON, JSONL and YAML file read, within bounds; each refusal FILE:LINE: what is wrong"),
    ("model_configs", "a model's config.json and an adapter's adapter_config.json, typed and bounded once"),
    ("emit", "every file written is a serialised value: one emitter per format, no value adds a key or a line"),
    ("fsutil", "locks, atomic writes, a temp folder swapped into place"),
    ("ownership", "the output policy: one manifest shape; a command replaces only files it wrote"),
    ("hardware", "chips (bf16 peak, HBM, price) and named hardware targets"),
    ("hub", "models and datasets by hub id: huggingface_hub's cache, the files a run reads, one-line refusals"),
    ("recipes", "the shipped recipes (package data)"),
    ("families", "one folder per Gemma family; the HF ↔ Tunix table and the views derived from it"),
    ("synth", "synthetic Verilog task families (synth/tasks) → training records and eval problems"),
    ("recipe", "the recipe schema, loading with located errors, consistency checks; Axolotl and TRL configs in, out"),
    ("models", "tiny random Gemma checkpoints and their tokenizer"),
    ("data", "sources, chat formatting, masks, packing, prepared shards, the backends' data adapters"),
    ("pretrain", "`crosstune pretrain`: the demo's base, trained in full on CPU, cached by content hash"),
    ("evals", "VerilogEval v2 and RTLLM: problems and protocols, generation, the sandboxed judge and pass@k"),
    ("run", "the run directory and the LoRA formats: layout and readers, metrics, checksums, resume, adapters"),
    ("planner", "the mesh and memory planner (`crosstune plan`)"),
    ("train", "the session above both backends (RunContext, step plan); train/torch and train/jax"),
    ("parity", "`crosstune parity`: both backends on one step of the same weights and rows"),
    ("plan", "`crosstune plan`: the planner's verdict, XLA's compile of the jax step, the search"),
    ("export", "a run's LoRA as a PEFT adapter or a merged HF model, streamed shard by shard"),
    ("serve", "the server: vLLM launch plans and the managed local server (`crosstune serve`)"),
    ("servebench", "the serving benchmark (`crosstune bench`): HTTP to any endpoint; imports nothing of serve/"),
    ("cost", "`crosstune cost`: prices, training and serving costs, spot, TCO"),
    ("study", "`crosstune study`: the pipeline on one machine into one resumable bundle (bundle.json)"),
    ("report", "`crosstune report`: the side-by-side report of runs, evals, sweeps and bundles"),
    ("launch", "`crosstune launch`: job specs that run a study on SkyPilot, GKE (JobSet) or Slurm"),
    ("demo", "`crosstune demo`: a study per backend, then the report; its held-out families and its summary"),
    ("doctor", "what is installed and which devices are seen"),
    ("commands", "collects every area's CLI commands"),
    ("cli", "the `crosstune` command"),
]
BACKENDS = ("crosstune.train.torch", "crosstune.train.jax")
STACKS = {  # third-party packages a backend alone may import
    "crosstune.train.torch": ("torch", "transformers", "peft", "trl", "accelerate"),
    "crosstune.train.jax": ("jax", "flax", "optax", "orbax", "grain", "qwix", "tunix"),
}


# Folders with rooms of their own, each listed lowest first; the folder's own modules stand above them.
SUBLAYERS: dict[str, tuple[str, ...]] = {
    "evals": ("problems", "generation", "judge"),  # what is asked ← how it is answered ← how answers are judged
}
# (layer, layer, why): neither imports the other.
APART = [("servebench", "serve", "the bench talks HTTP to any endpoint: what it knows of a server is its URL")]


def layer_of(module: str) -> int:
    if module == "crosstune":
        return 0
    top = module.split(".")[1]
    for i, (name, _) in enumerate(LAYERS):
        if name == top:
            return i
    raise AssertionError(f"{module} is in no layer of tests/test_layering.py: add its folder (and to README's map)")


def upward_imports(src: Path = SRC) -> list[str]:
    problems = []
    for me, path in modules(src).items():
        for line, target in package_imports(path, src):
            if layer_of(target) > layer_of(me):
                problems.append(
                    f"{path.relative_to(src)}:{line}: {me} ({LAYERS[layer_of(me)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    return problems


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def backend_leaks(src: Path = SRC) -> list[str]:
    """Imports of a backend from outside crosstune.train, of one backend (or its stack) by the other."""
    problems = []
    for me, path in modules(src).items():
        mine = next((b for b in BACKENDS if _inside(me, b)), None)
        for line, base, _ in imports_of(path, src):
            where = f"{path.relative_to(src)}:{line}: {me} imports {base}"
            for backend in BACKENDS:
                if _inside(base, backend) and not _inside(me, "crosstune.train"):
                    problems.append(f"{where} (only crosstune.train reaches the backends)")
                if mine and backend != mine and _inside(base, backend):
                    problems.append(f"{where} (the backends are blind to each other)")
            other = next((b for b in BACKENDS if mine and b != mine), None)
            if other and base.split(".")[0] in STACKS[other]:
                problems.append(f"{where} (the other backend's stack)")
    return problems


def private_reaches(src: Path = SRC) -> list[str]:
    """`from crosstune.a.b import _name` where the importer is not in crosstune.a.b's own package."""
    problems = []
    for me, path in modules(src).items():
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for line, base, names in imports_of(path, src):
            if not base.startswith("crosstune."):
                continue
            owner = base if (src / Path(*base.split(".")) / "__init__.py").is_file() else base.rpartition(".")[0]
            for name in names:
                if name.startswith("_") and not name.startswith("__") and owner != package:
                    problems.append(f"{path.relative_to(src)}:{line}: {me} imports {base}.{name}")
    return problems


CLI_ASSEMBLERS = ("crosstune.commands", "crosstune.cli")


def is_cli_module(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cli")


def cli_imports(src: Path = SRC) -> list[tuple[str, str, str]]:
    """(importer, CLI module, file:line) of every import of a CLI module by a module that is not a CLI assembler."""
    found = []
    for me, path in modules(src).items():
        if me in CLI_ASSEMBLERS:
            continue
        for line, target in package_imports(path, src):
            if is_cli_module(target) and target != me:
                found.append((me, target, f"{path.relative_to(src)}:{line}"))
    return found


def room_of(module: str, sublayers: dict[str, tuple[str, ...]] = SUBLAYERS) -> tuple[str, int, str] | None:
    """(folder, height, room) of a module inside a folder with rooms; the folder's own modules are the top room."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in sublayers:
        return None
    rooms = sublayers[parts[1]]
    if len(parts) > 2 and parts[2] in rooms:
        return parts[1], rooms.index(parts[2]), f"{parts[1]}/{parts[2]}"
    return parts[1], len(rooms), parts[1]


def upward_room_imports(src: Path = SRC, sublayers: dict[str, tuple[str, ...]] = SUBLAYERS) -> list[str]:
    problems = []
    for me, path in modules(src).items():
        mine = room_of(me, sublayers)
        for line, target in package_imports(path, src):
            theirs = room_of(target, sublayers)
            if mine and theirs and mine[0] == theirs[0] and theirs[1] > mine[1]:
                problems.append(f"{path.relative_to(src)}:{line}: {me} ({mine[2]}) imports {target} ({theirs[2]})")
    return problems


def apart_imports(src: Path = SRC, apart: list[tuple[str, str, str]] = APART) -> list[str]:
    pairs = {frozenset((a, b)) for a, b, _ in apart}
    problems = []
    for me, path in modules(src).items():
        for line, target in package_imports(path, src):
            tops = me.split(".")[1:2] + target.split(".")[1:2]
            if len(tops) == 2 and frozenset(tops) in pairs:
                problems.append(f"{path.relative_to(src)}:{line}: {me} imports {target} (kept apart)")
    return problems


BENCH = REPO / "bench"


def bench_reaches(bench: Path = BENCH, src: Path = SRC) -> list[str]:
    """bench/*.py are consumers above every layer, under src/'s rules: no backend internals (only crosstune.train's
    public face reaches crosstune.train.torch / .jax), no private names of a package, no CLI module."""
    known = modules(src)
    problems = []
    for path in sorted(bench.glob("*.py")):
        for line, base, names in imports_of(path, bench.parent):
            if not (base == "crosstune" or base.startswith("crosstune.")):
                continue
            where = f"{path.relative_to(bench.parent)}:{line}: imports {base}"
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in known] or [base]
            if any(_inside(t, b) for t in targets for b in BACKENDS):
                problems.append(f"{where} (only crosstune.train reaches the backends)")
            private = [n for n in [*base.split("."), *names] if n.startswith("_") and not n.startswith("__")]
            if private:
                problems.append(f"{where}: {', '.join(private)} (a private name)")
            if any(is_cli_module(t) or t in CLI_ASSEMBLERS for t in targets):
                problems.append(f"{where} (a CLI module)")
    return problems


def test_no_upward_imports():
    assert upward_imports() == []


def test_no_import_cycles_between_modules_or_folders():
    assert cycles(import_graph(SRC)) == []
    assert cycles(import_graph(SRC, depth=2)) == []


def test_the_rooms_of_a_folder_import_only_downward_and_every_room_is_listed():
    assert upward_room_imports() == []
    for folder, rooms in SUBLAYERS.items():
        found = sorted(p.parent.name for p in (SRC / "crosstune" / folder).glob("*/__init__.py"))
        assert found == sorted(rooms), f"crosstune/{folder}/: list its rooms in SUBLAYERS, lowest first"


def test_layers_kept_apart_import_nothing_of_each_other():
    assert apart_imports() == []


def test_the_backends_are_reached_only_through_train_and_are_blind_to_each_other():
    assert backend_leaks() == []


def test_no_module_reaches_into_another_package_s_private_names():
    assert private_reaches() == []


def test_no_module_but_the_command_line_imports_a_cli_module():
    assert [f"{where}: {me} imports {target}" for me, target, where in cli_imports()] == []


def test_bench_scripts_follow_the_rules_of_src(tmp_path):
    """bench/ is a consumer above every layer: what it measures of a backend it reaches through crosstune.train's
    public face (crosstune.train.parts), never a backend module, a private name or a CLI module."""
    assert bench_reaches() == []
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.py").write_text(
        "from crosstune.train.torch.model import build_model\nfrom crosstune.run.layout import _RESTORE\n"
        "from crosstune.plan import cli\nfrom crosstune.train.parts import torch_lora_model\n"
    )
    assert bench_reaches(tmp_path / "bench") == [
        "bench/b.py:1: imports crosstune.train.torch.model (only crosstune.train reaches the backends)",
        "bench/b.py:2: imports crosstune.run.layout: _RESTORE (a private name)",
        "bench/b.py:3: imports crosstune.plan (a CLI module)",
    ]


def test_every_cli_module_exposes_register_and_the_command_line_calls_each():
    """One registration pattern: `register(app)` in every area's CLI module, each imported by crosstune.commands."""
    registered = {target for _, target in package_imports(SRC / "crosstune" / "commands.py", SRC)}
    cli = {m for m in modules(SRC) if is_cli_module(m) and m not in CLI_ASSEMBLERS} | {"crosstune.doctor"}
    assert sorted(cli - registered) == [] and sorted(registered - cli) == []
    for module in sorted(cli):
        tree = ast.parse(modules(SRC)[module].read_text(encoding="utf-8"))
        found = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "register"]
        assert [[a.arg for a in f.args.args] for f in found] == [["app"]], f"{module}: no register(app)"


def test_every_folder_has_a_layer_and_the_readme_map_lists_them_in_order():
    """README's "Repository map" names each layer's folder (`name/`) or module (`name.py`), lowest first."""
    tops = {p.stem if p.is_file() else p.name for p in (SRC / "crosstune").iterdir()}
    tops -= {"__init__", "__pycache__", "py"}
    assert sorted(tops - {name for name, _ in LAYERS}) == []
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Repository map") :]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    positions = []
    for name, _ in LAYERS:
        m = re.search(rf"^  {re.escape(name)}(/|\.py)\s", section, re.M)
        assert m, f"README's Repository map lacks {name}"
        positions.append(m.start())
    assert positions == sorted(positions), "README's Repository map lists the layers out of order"


def test_the_checkers_catch_what_they_look_for(tmp_path):
    """The checkers themselves: an upward import (between layers, and between the rooms of one folder), a cycle, a
    backend import from outside train, a private import across packages, a CLI module imported by anything but the
    command line and an import between layers kept apart are each reported."""
    root = tmp_path / "crosstune"
    for folder in ("families", "run", "export", "train/torch", "train/jax"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "train" / "__init__.py").write_text("")
    (root / "families" / "bad.py").write_text("import math\n\n\ndef f():\n    from crosstune.train import session\n")
    (root / "train" / "session.py").write_text("from crosstune.families import bad\n")
    (root / "export" / "leak.py").write_text("from crosstune.train.jax import model\nfrom crosstune.run.x import _y\n")
    (root / "train" / "jax" / "model.py").write_text("import torch\n")
    (root / "run" / "x.py").write_text("_y = 1\n")
    assert upward_imports(tmp_path) == [
        "crosstune/families/bad.py:5: crosstune.families.bad (families) imports crosstune.train.session (train)"
    ]
    assert cycles(import_graph(tmp_path)) == [["crosstune.families.bad", "crosstune.train.session"]]
    assert backend_leaks(tmp_path) == [
        "crosstune/export/leak.py:1: crosstune.export.leak imports crosstune.train.jax (only crosstune.train reaches "
        "the backends)",
        "crosstune/train/jax/model.py:1: crosstune.train.jax.model imports torch (the other backend's stack)",
    ]
    assert private_reaches(tmp_path) == ["crosstune/export/leak.py:2: crosstune.export.leak imports crosstune.run.x._y"]
    (root / "run" / "x_cli.py").write_text("from crosstune.run import x\n")
    (root / "export" / "table.py").write_text("def f():\n    from crosstune.run import x_cli\n")
    (root / "commands.py").write_text("from crosstune.run import x_cli\n")
    assert cli_imports(tmp_path) == [("crosstune.export.table", "crosstune.run.x_cli", "crosstune/export/table.py:2")]
    for folder in ("evals/problems", "evals/judge", "servebench", "serve"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "evals" / "__init__.py").write_text("")
    (root / "evals" / "problems" / "sets.py").write_text("from crosstune.evals.judge import verdict\n")
    (root / "evals" / "judge" / "verdict.py").write_text("from crosstune.evals.problems import sets\n")
    (root / "evals" / "cli.py").write_text("from crosstune.evals.judge import verdict\n")
    assert upward_room_imports(tmp_path) == [
        "crosstune/evals/problems/sets.py:1: crosstune.evals.problems.sets (evals/problems) imports "
        "crosstune.evals.judge.verdict (evals/judge)"
    ]
    (root / "servebench" / "client.py").write_text("def f():\n    from crosstune.serve import engine\n")
    (root / "serve" / "engine.py").write_text("")
    assert apart_imports(tmp_path) == [
        "crosstune/servebench/client.py:2: crosstune.servebench.client imports crosstune.serve.engine (kept apart)"
    ]
