"""Case generators of the commands that read a folder the user named and write outputs: export (a run directory),
eval (a problem set, a samples file or the fake endpoint), bench serve (the fake endpoint's streams), report (runs,
evaluations, sweeps, bundles), study (a folder bucket)."""

from __future__ import annotations

from tests.fuzz import hostile
from tests.fuzz.case import Case, Ctx, garbage
from tests.fuzz.commands_inputs import NOT_A_FILE
from tests.fuzz.world import BUNDLE

MODEL = "m"  # the fake endpoint's one served model


def export(ctx: Ctx) -> Case:
    ctx.copy("run")
    protected: list = []

    def checkpoint():
        name = ctx.rng.choice(
            ["checkpoint-٣", "checkpoint-" + "9" * 30, "checkpoint--1", "checkpoint-2", "checkpoint-"]
        )
        (ctx.tree / "run" / "checkpoints").mkdir(exist_ok=True)
        ctx.copy("run/adapter", f"run/checkpoints/{name}")
        if ctx.chance(0.5):
            ctx.entry(f"run/checkpoints/{name}", ["link_out_dir", "link_in", "dangling", "loop"])
        ctx.note(f"a checkpoint named {name!r}")

    def base():
        ctx.copy("model", "base")
        if ctx.chance(0.6):
            ctx.content("base/config.json", "json")
        else:
            ctx.entry(ctx.rng.choice(ctx.files("base")), NOT_A_FILE)
        return ["--base", "base"]

    mutations = [
        lambda: ctx.content("run/run.json", "json"),
        lambda: ctx.entry("run/run.json"),
        lambda: ctx.entry(ctx.rng.choice(ctx.files("run/adapter"))),
        lambda: ctx.content("run/adapter/adapter_config.json", "json"),
        lambda: ctx.entry("run/adapter", ["link_out_dir", "folder", "dangling", "loop"]),
        checkpoint,
        lambda: ctx.option("--step"),
        lambda: protected.extend(ctx.out_path("out/export")),
        base,
        lambda: ctx.option("--to", "string"),
    ]
    extra = ctx.mutate(mutations)
    to = ctx.rng.choice(["adapter", "merged", "both"])
    flags = ["--overwrite"] if ctx.chance(0.3) else []
    return Case(["export", "run", "--to", to, "--out", "out/export", *extra, *flags], 90, protected=protected)


EVAL_OPTIONS = {
    "--n": "number",
    "--k": "number",
    "--temperature": "number",
    "--top-p": "number",
    "--max-tokens": "number",
    "--seed": "number",
    "--prompt-style": "string",
    "--shots": "number",
    "--concurrency": "number",
    "--workers": "number",
    "--timeout": "number",
    "--retries": "number",
    "--connect-timeout": "number",
    "--request-timeout": "number",
    "--memory-mib": "number",
    "--task": "string",
    "--protocol": "string",
    "--problem": "string",
    "--api-key-env": "string",
}


def eval_(ctx: Ctx) -> Case:
    ctx.copy("problems")
    names = [p for p in ctx.files("problems") if not p.endswith("problems.txt")]
    source = ctx.rng.choice(["endpoint", "samples", "references"])
    reply, is_garbage = None, False
    base = [
        "eval",
        "--problems",
        "problems",
        "--out",
        "out/eval",
        "--n",
        "1",
        "--k",
        "1",
        "--timeout",
        "10",
        "--retries",
        "0",
        "--workers",
        "1",
    ]
    if source == "endpoint":
        base += ["--endpoint", ctx.endpoint, "--model", MODEL, "--request-timeout", "10", "--max-tokens", "16"]
        if ctx.chance(0.6):
            reply, is_garbage = garbage(ctx.rng, stream=False)
            ctx.note(f"the endpoint answers {reply[:60]!r}")
    elif source == "samples":
        ctx.copy("samples.jsonl")
        base += ["--samples-file", "samples.jsonl"]
    else:
        base += ["--references-only"]
    protected: list = []
    flag_list = sorted(EVAL_OPTIONS)
    mutations = [
        lambda: ctx.entry(ctx.rng.choice(names)),  # a problem file: a link out is refused, never read
        lambda: ctx.entry(ctx.rng.choice(names)),
        lambda: (
            ctx.content("problems/problems.txt", "jsonl") if ctx.chance(0.3) else ctx.entry("problems/problems.txt")
        ),
        lambda: ctx.odd_name("problems"),
        lambda: ctx.content("samples.jsonl", "jsonl") if source == "samples" else None,
        lambda: ctx.option(f := ctx.rng.choice(flag_list), EVAL_OPTIONS[f]),
        lambda: ctx.option(f := ctx.rng.choice(flag_list), EVAL_OPTIONS[f]),
        lambda: protected.extend(ctx.out_path("out/eval", ("user", "link_out_dir", "file", "under_a_file"))),
    ]
    extra = ctx.mutate(mutations, at_least=0 if reply else 1)
    # 3: the report is written but some samples could not be generated (the endpoint failed them)
    codes = frozenset({0, 1, 2, 3})
    return Case([*base, *extra], 120, codes=codes, reply=reply, garbage=is_garbage, protected=protected)


BENCH_OPTIONS = {
    "--contexts": "number",
    "--concurrency": "number",
    "--rates": "number",
    "--max-concurrency": "number",
    "--burstiness": "number",
    "--output-len": "number",
    "--num-requests": "number",
    "--warmup": "number",
    "--api": "string",
    "--timeout": "number",
    "--cell-timeout": "number",
    "--probe-timeout": "number",
    "--slo": "string",
    "--seed": "number",
    "--prefix-reuse": "number",
    "--repeats": "number",
    "--find-max-rate": "string",
    "--max-rate-steps": "number",
    "--rate-resolution": "number",
    "--preset": "string",
    "--label": "string",
    "--target": "string",
    "--model": "string",
}


def bench_serve(ctx: Ctx) -> Case:
    base = [
        "bench",
        "serve",
        "--endpoint",
        ctx.endpoint,
        "--model",
        MODEL,
        "--tokenizer",
        "../world/model",
        "--contexts",
        "16",
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--warmup",
        "0",
        "--output-len",
        "4",
        "--timeout",
        "5",
        "--cell-timeout",
        "20",
        "--probe-timeout",
        "3",
        "--seed",
        "0",
        "--out",
        "out/bench",
    ]
    reply, is_garbage = garbage(ctx.rng, stream=True) if ctx.chance(0.6) else (None, False)
    if reply is not None:
        ctx.note(f"the endpoint streams {reply[:60]!r}")
    protected: list = []
    flag_list = sorted(BENCH_OPTIONS)

    def tokenizer():
        ctx.copy("model", "tok")
        if ctx.chance(0.6):
            ctx.content(ctx.rng.choice(["tok/tokenizer_config.json", "tok/tokenizer.json", "tok/config.json"]), "json")
        else:
            ctx.entry(ctx.rng.choice(ctx.files("tok")), NOT_A_FILE)
        return ["--tokenizer", "tok"]

    mutations = [
        lambda: ctx.option(f := ctx.rng.choice(flag_list), BENCH_OPTIONS[f]),
        lambda: ctx.option(f := ctx.rng.choice(flag_list), BENCH_OPTIONS[f]),
        lambda: ctx.option(f := ctx.rng.choice(flag_list), BENCH_OPTIONS[f]),
        tokenizer,
        lambda: protected.extend(ctx.out_path("out/bench")),
    ]
    extra = ctx.mutate(mutations, at_least=0 if reply else 1)
    return Case([*base, *extra], timeout_s=90, reply=reply, garbage=is_garbage, protected=protected)


def report(ctx: Ctx) -> Case:
    inputs = {"run": "cost/tiny-torch", "eval": "eval", "bench": "bench/2xh100", BUNDLE: BUNDLE}
    chosen = ctx.rng.sample(sorted(inputs), ctx.rng.randint(1, 3))
    for name in chosen:
        ctx.copy(inputs[name], f"in/{name}")
    files = [f for name in chosen for f in ctx.files(f"in/{name}")]
    protected: list = []

    def json_file():
        f = ctx.rng.choice([f for f in files if f.endswith((".json", ".jsonl"))] or files)
        ctx.content(f, "jsonl" if f.endswith(".jsonl") else "json")

    mutations = [
        json_file,
        json_file,
        lambda: ctx.entry(ctx.rng.choice(files)),  # inside a run, an evaluation, a sweep or a bundle: confined
        lambda: ctx.odd_name(f"in/{ctx.rng.choice(chosen)}"),
        lambda: ctx.option("--slo", "string"),
        lambda: ctx.option("--days"),
        lambda: ctx.option("--tokens-per-day"),
        lambda: ctx.option("--context"),
        lambda: ctx.option("--pair", "string"),
        lambda: protected.extend(ctx.out_path("out/report")),
    ]
    extra = ctx.mutate(mutations)
    return Case(["report", *(f"in/{n}" for n in chosen), "--out", "out/report", *extra], 90, protected=protected)


def study(ctx: Ctx) -> Case:
    name = ctx.write_recipe()
    ctx.copy("data")
    copy = f"bucket/{BUNDLE}"
    ctx.copy(BUNDLE, copy)
    bucket = ["--bucket", "bucket"]

    def bucket_value():
        value = ctx.rng.choice(
            [
                BUNDLE,
                f"{BUNDLE}/inner",
                "GS://b",
                "gs://",
                "s3:/b",
                "file://bucket",
                "./bucket/",
                hostile.string(ctx.rng),
            ]
        )
        ctx.note(f"--bucket {value[:60]!r}")
        bucket[1] = value

    mutations = [
        lambda: ctx.content(f"{copy}/bundle.json", "json"),
        lambda: ctx.content(f"{copy}/bundle.json", "json"),
        lambda: ctx.entry(copy, ["link_out_dir", "dangling", "loop", "fifo"]),  # the bundle's copy itself a link
        lambda: ctx.entry(ctx.rng.choice(ctx.files(copy))),
        lambda: ctx.odd_name(copy),
        bucket_value,
        lambda: ctx.option(ctx.rng.choice(["--only", "--from", "--with"]), "string"),
        lambda: ctx.copy(BUNDLE) and ctx.content(f"{BUNDLE}/bundle.json", "json"),  # a local bundle, damaged
        lambda: ctx.sets(),
    ]
    extra = ctx.mutate(mutations)
    argv = ["study", name, "--out", BUNDLE, "--only", "prepare", *bucket, *extra]
    return Case(argv, timeout_s=120)
