"""Case generators of the commands that read a recipe, data and numbers: recipe validate/show, data prepare/stats,
train (its option checks), plan, serve plan, launch (the spec only, never --submit), model tiny/build, cost."""

from __future__ import annotations

from tests.fuzz import hostile
from tests.fuzz.case import Case, Ctx
from tests.fuzz.world import recipe

NOT_A_FILE = ["dangling", "loop", "folder", "fifo", "dev_zero"]  # for a path the user names (links out are theirs)


def _recipe_mutations(ctx: Ctx, name: str = "recipe.yaml") -> list:
    return [
        lambda: ctx.content(name, "yaml"),
        lambda: ctx.entry(name, NOT_A_FILE),
        lambda: ctx.sets(),
        lambda: ctx.sets(),
    ]


def recipe_validate(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    extra = ctx.mutate(_recipe_mutations(ctx))
    files = [name, ctx.write_recipe(name="second.yaml")] if ctx.chance(0.2) else [name]
    return Case(["recipe", "validate", *files, *extra], timeout_s=30)


def recipe_show(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    return Case(["recipe", "show", name, *ctx.mutate(_recipe_mutations(ctx))], timeout_s=30)


def data_prepare(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    ctx.copy("data")
    protected = []

    def prepared_dir():
        protected.extend(ctx.out_path("out/prepared"))

    mutations = [
        lambda: ctx.content("data/train.jsonl", "jsonl"),
        lambda: ctx.content("data/train.jsonl", "jsonl"),
        lambda: ctx.entry("data/train.jsonl", NOT_A_FILE),
        lambda: ctx.content(name, "yaml"),
        lambda: ctx.sets(),
        prepared_dir,
    ]
    extra = ctx.mutate(mutations)
    flags = [f for f in ("--lenient", "--force") if ctx.chance(0.4)]
    return Case(["data", "prepare", name, *extra, *flags], timeout_s=90, protected=protected)


def data_stats(ctx: Ctx) -> Case:
    ctx.write_recipe()
    ctx.copy("data")
    prepared = ctx.copy("prepared", "out/prepared")
    shards = sorted(p.relative_to(ctx.tree).as_posix() for p in prepared.rglob("*.npy"))
    mutations = [
        lambda: ctx.content("out/prepared/manifest.json", "json"),
        lambda: ctx.entry("out/prepared/manifest.json"),
        lambda: ctx.content("out/prepared/stats.json", "json") if (prepared / "stats.json").exists() else None,
        lambda: ctx.entry(ctx.rng.choice(shards)),
        lambda: _npy_header(ctx, ctx.rng.choice(shards)),
        lambda: ctx.odd_name("out/prepared"),
    ]
    extra = ctx.mutate(mutations)
    target = "out/prepared" if ctx.chance(0.7) else "recipe.yaml"
    return Case(["data", "stats", target, *extra], timeout_s=60)


def _npy_header(ctx: Ctx, rel: str) -> None:
    """A .npy whose header claims a huge or negative shape, another dtype, or is cut short."""
    path = ctx.tree / rel
    if not ctx.in_tree(rel):
        return
    header = ctx.rng.choice(["(10000000000000,)", "(-1,)", "(3, 1000000000000)", "()", "'x'"])
    dtype = ctx.rng.choice(["<i4", "<f8", "|O", "<U100000000"])
    text = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {header}, }}"
    path.unlink()
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + b"\x00" * 64)
    ctx.note(f"{rel}: .npy header {text}")


def train(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    ctx.copy("data")
    ctx.copy("prepared", "out/prepared")
    protected = []

    def run_dir():
        if ctx.chance(0.3):
            ctx.copy("run", "out/run")
            ctx.content("out/run/run.json", "json")
            return ["--run-dir", "out/run", "--resume"]
        protected.extend(ctx.out_path("out/run"))
        return ["--run-dir", "out/run"]

    mutations = [
        lambda: ctx.option("--devices"),
        lambda: ctx.option("--nodes"),
        lambda: ctx.option("--node-rank"),
        lambda: ctx.option("--main-address", "string"),
        lambda: ctx.option("--backend", "string"),
        lambda: ctx.sets(),
        run_dir,
    ]
    extra = ctx.mutate(mutations)
    return Case(["train", name, "--backend", "torch", *extra], timeout_s=120, protected=protected)


def plan(ctx: Ctx) -> Case:
    doc = recipe()
    if ctx.chance(0.5):  # a TPU recipe: the mesh and memory checks run
        doc.update(hardware="tpu-v5p-8", model={"family": "gemma4", "size": "31b"})
        doc["backend"]["jax"]["mesh"] = {"fsdp": 1, "tp": 4}
    name = ctx.write_recipe(doc)
    mutations = [
        *_recipe_mutations(ctx, name),
        lambda: ctx.option("--layers"),
        lambda: ctx.option("--backend", "string"),
    ]
    extra = ctx.mutate(mutations)
    return Case(["plan", name, *extra, *(["--json"] if ctx.chance(0.3) else [])], timeout_s=60)


def serve_plan(ctx: Ctx) -> Case:
    name = ctx.write_recipe()

    def adapter():
        ctx.copy("run/adapter", "adapter")
        if ctx.chance(0.7):
            ctx.content("adapter/adapter_config.json", "json")
        else:
            ctx.entry("adapter/adapter_config.json", NOT_A_FILE)
        return ["--adapter", "adapter"]

    mutations = [
        lambda: ctx.option("--tp"),
        lambda: ctx.option("--dp"),
        lambda: ctx.option("--target", "string"),
        lambda: ctx.option("--kv-cache-dtype", "string"),
        lambda: ctx.option("--name", "string"),
        adapter,
        lambda: ctx.content(name, "yaml"),
    ]
    return Case(["serve", "plan", name, *ctx.mutate(mutations)], timeout_s=30)


def launch(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    on = ctx.rng.choice(["skypilot", "gke", "slurm"])
    protected = []

    def out():
        protected.extend(ctx.out_path("spec.yaml", ("file", "link_out_dir", "fifo")))

    mutations = [
        lambda: ctx.option("--target", "string"),
        lambda: ctx.option("--backend", "string"),
        lambda: ctx.option("--bucket", "string"),
        lambda: ctx.option("--pvc", "string"),
        lambda: ctx.option("--image", "string"),
        lambda: ctx.option("--nodes"),
        lambda: ctx.option("--time", "string"),
        lambda: ctx.sets(),
        out,
    ]
    extra = ctx.mutate(mutations)
    spot = ["--spot"] if ctx.chance(0.3) else []
    return Case(["launch", name, "--on", on, "--out", "spec.yaml", *extra, *spot], timeout_s=30, protected=protected)


def _model_out(ctx: Ctx, protected: list) -> None:
    protected.extend(ctx.out_path("out/model"))


def model_tiny(ctx: Ctx) -> Case:
    protected: list = []

    def corpus():
        ctx.copy("data", "corpus")
        if ctx.chance(0.6):
            ctx.content("corpus/train.jsonl", "jsonl")
        else:
            ctx.entry("corpus/train.jsonl")  # the corpus folder is a root the user named: a link out is refused
        return ["--corpus", "corpus"]

    mutations = [
        lambda: ctx.option("--family", "string"),
        lambda: ctx.option("--seed"),
        lambda: ctx.option("--shards"),
        lambda: ctx.option("--layout", "string"),
        lambda: ctx.option("--dtype", "string"),
        corpus,
        lambda: _model_out(ctx, protected),
    ]
    extra = ctx.mutate(mutations)
    force = ["--force"] if ctx.chance(0.3) else []
    return Case(["model", "tiny", "--family", "gemma4", "--out", "out/model", *extra, *force], 120, protected=protected)


def model_build(ctx: Ctx) -> Case:
    protected: list = []
    family, size = ctx.rng.choice(
        [("gemma4", "tiny"), ("gemma4", "tiny-e"), ("gemma4", "tiny-moe"), ("gemma3", "tiny")]
    )
    mutations = [
        lambda: ctx.option("--layers"),
        lambda: ctx.option("--vocab"),
        lambda: ctx.option("--shards"),
        lambda: ctx.option("--seed"),
        lambda: ctx.option("--size", "string"),
        lambda: ctx.option("--family", "string"),
        lambda: _model_out(ctx, protected),
        lambda: ctx.option("--writer", "string"),
    ]
    extra = ctx.mutate(mutations)
    argv = ["model", "build", "--family", family, "--size", size, "--out", "out/model", "--layers", "2", *extra]
    return Case(argv, timeout_s=120, protected=protected)


def cost(ctx: Ctx) -> Case:
    which = ctx.rng.choice(["train", "serve", "tco", "what-if"])
    if which == "train":
        ctx.copy("cost", "runs")
        files = ["runs/tiny-torch/run.json", "runs/tiny-torch/metrics.jsonl", "runs/data/tiny/manifest.json"]
        kinds = {"run.json": "json", "metrics.jsonl": "jsonl", "manifest.json": "json"}
        mutations = [lambda f=f: ctx.content(f, kinds[f.rsplit("/", 1)[1]]) for f in files]
        mutations += [
            lambda: ctx.entry(files[0]),
            lambda: ctx.option("--target", "string"),
            lambda: ctx.option("--restart-minutes"),
            lambda: ctx.option("--preemptions-per-hour"),
        ]
        argv = ["cost", "train", "runs/tiny-torch"]
    elif which == "serve":
        ctx.copy("bench")
        summary = "bench/2xh100/summary.json"
        mutations = [
            lambda: ctx.content(summary, "json"),
            lambda: ctx.entry(summary, NOT_A_FILE),
            lambda: ctx.option("--slo", "string"),
            lambda: ctx.option("--target", "string"),
        ]
        argv = ["cost", "serve", summary]
    elif which == "tco":
        ctx.copy("bench")
        ctx.copy("workload.yaml")
        mutations = [
            lambda: ctx.content("workload.yaml", "yaml"),
            lambda: ctx.content("workload.yaml", "yaml"),
            lambda: ctx.option("--days"),
            lambda: ctx.option("--tokens-per-day"),
            lambda: ctx.option("--hours-per-day"),
            lambda: ctx.content("bench/tpu-v6e-8/summary.json", "json"),
        ]
        argv = ["cost", "tco", "workload.yaml"]
    else:
        mutations = [
            lambda: ctx.option("--tokens-per-s"),
            lambda: ctx.option("--mfu"),
            lambda: ctx.option("--seq-len"),
            lambda: ctx.option("--model", "string"),
            lambda: ctx.option("--target", "string"),
        ]
        argv = [
            "cost",
            "what-if",
            "--target",
            "2xh100",
            "--tokens",
            hostile.number(ctx.rng) if ctx.chance(0.3) else "9.2e6",
        ]

    def prices_file():
        ctx.copy("prices.yaml")
        ctx.content("prices.yaml", "yaml")
        return ["--prices", "prices.yaml"]

    return Case([*argv, *ctx.mutate([*mutations, prices_file])], timeout_s=30)
