"""The JAX backend trains tiny Gemmas on 8 fake CPU devices: shardings, loss definition, metrics, run directory."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest

from tests.helpers.jax_recipes import tiny_recipe

pytest.importorskip("tunix")

STEPS = 8
SCALAR_OUTPUTS = 4096  # bytes: the step's loss and grad norm (and XLA's tuple bookkeeping), never an array
MARGIN = 0.08  # mean loss of the last 3 steps below step 1's by at least this (a random tiny base learns slowly)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("jax_train")


def _hf_step_loss(model_dir, micro_batches: list[dict]) -> tuple[float, float]:
    """The step's loss from transformers, document by document: (token-weighted mean over the whole step,
    mean of the per-micro-batch means — what tunix's default loss would report)."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="eager", dtype=torch.float32
    ).eval()
    sums, counts = [], []
    for mb in micro_batches:
        total, n = 0.0, 0
        for row in range(mb["input_tokens"].shape[0]):
            seg = mb["segment_ids"][row]
            for doc in np.unique(seg[seg > 0]):
                idx = np.flatnonzero(seg == doc)
                ids, mask, pos = mb["input_tokens"][row, idx], mb["input_mask"][row, idx], mb["positions"][row, idx]
                assert not mask[0], "a document's first token is never a target (nothing of its own precedes it)"
                with torch.no_grad():
                    logits = model(
                        torch.tensor(ids[None]), position_ids=torch.tensor(pos[None]), use_cache=False
                    ).logits[0]
                logp = torch.log_softmax(logits[:-1].double(), -1)
                nll = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
                total += float(nll[mask[1:]].sum())
                n += int(mask[1:].sum())
        sums.append(total)
        counts.append(n)
    return sum(sums) / sum(counts), float(np.mean([s / c for s, c in zip(sums, counts, strict=True)]))


def _per_device(tree) -> int:
    import jax

    return sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(tree))


def _held_once(trainer, batch):
    """XLA's buffer accounting of the trainer's own jitted step: the frozen base is an argument only; what the step
    changes (LoRA, optimizer state with MultiSteps' accumulator) comes back in the donated buffers and nothing else
    but the loss and grad norm does. (Tunix 0.1.7's own jit, only the optimizer donated, returns a copy of the
    whole base: the 31B's numbers are in docs/BENCHMARKS.md.) Returns the base's state."""
    from flax import nnx

    from crosstune.train.jax.train_step import FROZEN

    train_step, _ = trainer.jit_train_and_eval_step()
    mem = train_step.func.lower(trainer.model, trainer.optimizer, batch).compile().memory_analysis()
    base = nnx.state(trainer.model, FROZEN)
    changed = _per_device(nnx.state(trainer.model, nnx.Not(FROZEN))) + _per_device(nnx.state(trainer.optimizer))
    assert mem.argument_size_in_bytes == _per_device(base) + changed + _per_device(batch)
    assert mem.alias_size_in_bytes == changed  # every changed byte written in place
    assert mem.output_size_in_bytes - mem.alias_size_in_bytes < SCALAR_OUTPUTS
    return base


@contextlib.contextmanager
def _compiled_programs():
    """The names of the programs XLA compiles inside the block, in order (jax.monitoring's compile events)."""
    import jax
    from jax._src import monitoring

    names: list[str] = []

    def listen(event: str, duration_secs: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            names.append(str(kwargs.get("fun_name", "")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        if listen in monitoring.get_event_duration_listeners():  # tunix's trainer.close() clears them all
            jax.monitoring.unregister_event_duration_listener(listen)


# slow: 8 fake devices compile the step over fsdp x tp (~40 CPU s, the default suite's longest test); every default
# jax test trains on tiny-cpu's tp=2 mesh, and tests/planner checks the replicated-heads rule
@pytest.mark.slow
def test_train_on_2x4_mesh_with_indivisible_kv_heads(work, tiny_gemma4_dir, synth_corpus_dir):
    """Tiny Gemma 4 on fsdp=2 × tp=4: tp can't split its 2 sliding KV heads (nor the 1 global one), so the
    planner's choice (replicate them) trains; shardings, the step's buffers (the frozen base held once),
    token-weighted loss, metrics and run dir are checked."""
    import jax
    from flax import nnx
    from tunix.sft import sharding_utils

    from crosstune.planner import plan_recipe, replicated_tensors
    from crosstune.run.metrics import METRIC_DEFINITIONS, read_metrics
    from crosstune.run.records import Mesh, read_run_record
    from crosstune.train.jax.batches import optimizer_steps
    from crosstune.train.jax.model import optimizer_sharding_mismatches, sharding_problems, spec_problems
    from crosstune.train.jax.train_step import FROZEN
    from crosstune.train.session import TrainingSession

    mesh_args = ("backend.jax.mesh.fsdp=2", "backend.jax.mesh.tp=4")
    common = (*mesh_args, f"train.max_steps={STEPS}", "train.learning_rate=1e-2", "train.warmup_steps=2")
    common += ("train.per_device_batch_size=1", "train.grad_accumulation=2", "train.checkpoint_every=3")
    with pytest.raises(Exception, match="KV heads on sliding layers"):
        tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, work, "gemma4", *common)  # the recipe check says no
    recipe = tiny_recipe(
        tiny_gemma4_dir, synth_corpus_dir, work, "gemma4", *common, "backend.jax.replicate_indivisible_heads=true"
    )
    plan = plan_recipe(recipe, backend="jax")
    assert plan.ok and plan.tp_issues
    session = TrainingSession(recipe, "jax", work / "runs" / "g4-2x4", progress=False)
    with session.started() as backend:
        run = backend.run
        mesh, trainer = run.mesh, run.trainer
        # the planner predicted exactly what loading replicated (base + LoRA tensors)
        assert sorted(x.path for x in run.replicated) == sorted(
            replicated_tensors(plan.spec, 2, 4, 8, recipe.lora.targets)
        )
        lora = nnx.state(trainer.model, nnx.LoRAParam)
        opt = nnx.state(trainer.optimizer, nnx.optimizer.OptState)
        assert spec_problems(trainer.model) == []  # every LoRA spec fits its rank
        assert sharding_problems(lora, mesh) == [] and sharding_problems(opt, mesh) == []
        assert optimizer_sharding_mismatches(trainer.optimizer, trainer.model) == []
        specs = {jax.tree_util.keystr(p): x.sharding.spec for p, x in jax.tree_util.tree_leaves_with_path(lora)}
        assert any("tp" in s for s in specs.values()) and any("fsdp" in s for s in specs.values())
        kv = nnx.state(trainer.model, nnx.Param)["layers"][0]["attn"]["kv_einsum"]["w"]
        assert kv.value.sharding.spec[1] is None  # 2 KV heads kept whole over tp=4
        # inputs: the trainer's own iterator hands out global arrays split over fsdp, which tunix's shard_input
        # passes through (it would replicate a process's rows when they are fewer than fsdp)
        trainer_inputs = run.micro_batches(0)
        batch = next(trainer_inputs)
        assert all(x.sharding.spec == jax.sharding.PartitionSpec("fsdp") for x in batch.values())
        assert all(x.sharding.mesh.shape == mesh.shape and x.shape[0] == 2 for x in batch.values())
        assert sharding_utils.shard_input(batch, ("fsdp",)) is batch
        first = next(optimizer_steps((run.dataset[i] for i in range(2)), 2))  # the same step, on the host
        np.testing.assert_array_equal(np.asarray(batch["input_tokens"]), first[0]["input_tokens"])
        before = {jax.tree_util.keystr(p): x.sharding for p, x in jax.tree_util.tree_leaves_with_path(opt)}
        base = nnx.state(trainer.model, FROZEN)
        with _compiled_programs() as compiled:
            fit_start = time.perf_counter()
            result = session.fit(backend)
            fit_wall = time.perf_counter() - fit_start
        # No stall at step 2: the train step is the last program compiled, once. Whatever the steps' bookkeeping
        # runs (learning rate, metrics, checkpoint saves) is ready before it or runs on the host; a learning rate
        # evaluated by optax per row compiled ~12 scalar programs between steps 1 and 2 (0.7 s on the v5e chip).
        assert [n for n in compiled if "crosstune_train_step" in n] == [compiled[-1]], compiled
        after = dict(nnx.to_flat_state(_held_once(trainer, batch)))  # (the compiled step is jax's cached one)
        assert all(after[k].value is v.value for k, v in nnx.to_flat_state(base))  # the loaded arrays, never rewritten
        opt_after = nnx.state(trainer.optimizer, nnx.optimizer.OptState)
        for p, x in jax.tree_util.tree_leaves_with_path(opt_after):  # pinned: no drift, no second compilation
            assert x.sharding.is_equivalent_to(before[jax.tree_util.keystr(p)], x.ndim)

    losses = result.losses
    assert len(losses) == STEPS and np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < losses[0] - MARGIN, losses

    # step 1 (LoRA B = 0: the base model) equals transformers' token-weighted mean over both micro-batches
    token_weighted, per_micro_mean = _hf_step_loss(tiny_gemma4_dir, first)
    assert losses[0] == pytest.approx(token_weighted, abs=1e-4)
    assert abs(token_weighted - per_micro_mean) > 1e-4  # the two conventions differ on this data

    rows = read_metrics(result.run_dir)
    assert [r.step for r in rows] == list(range(1, STEPS + 1))
    assert set(rows[0].model_dump()) == set(METRIC_DEFINITIONS)
    assert rows[0].learning_rate == 0.0 and rows[1].learning_rate == pytest.approx(5e-3)
    assert all(r.trained_tokens > 0 and r.grad_norm > 0 and r.mfu is None for r in rows)
    record = read_run_record(result.run_dir)
    assert record.backend == "jax" and record.mesh == Mesh(fsdp=2, tp=4) and record.devices == 8
    assert record.compile_time_measure == "xla" and record.compile_time_s > 0
    # Compilation is subtracted from the first step, not counted twice: the steps' times plus the compile and the
    # saves fit inside the fit's wall clock whatever the load (counted twice, they would exceed it by the compile).
    # A comparison of step time with compile time would not: on 2 loaded cores a step of 8 fake devices can
    # outlast the compile.
    accounted = sum(r.step_time_s for r in rows) + record.compile_time_s + (record.checkpoint_time_s or 0.0)
    assert accounted <= fit_wall, (accounted, fit_wall)
    assert (result.run_dir / "recipe.yaml").is_file() and (result.run_dir / "tensorboard").is_dir()
    saved = sorted(int(p.name) for p in (result.run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [6, STEPS]  # every 3 steps + the last one, keep_last 2


def test_run_dir_with_checkpoints_needs_resume(work, tiny_gemma4_dir, synth_corpus_dir):
    from crosstune.train.backend import TrainError
    from crosstune.train.session import TrainingSession

    recipe = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, work, "gemma4")
    (work / "occupied" / "checkpoints" / "5").mkdir(parents=True)
    with pytest.raises(TrainError, match="--resume"):
        with TrainingSession(recipe, "jax", work / "occupied").started():
            pass


@pytest.mark.slow
@pytest.mark.parametrize(("fsdp", "tp", "replicate", "dropout"), [(1, 1, False, 0.0), (1, 4, True, 0.05)])
def test_gemma3_trains_on_mesh(work, tiny_gemma3_dir, synth_corpus_dir, fsdp, tp, replicate, dropout):
    """Tiny Gemma 3 (4 heads, 2 KV heads) alone and on tp=4 (KV heads kept whole), LoRA dropout on."""
    from crosstune.train.session import train

    recipe = tiny_recipe(
        tiny_gemma3_dir,
        synth_corpus_dir,
        work,
        "gemma3",
        f"backend.jax.mesh.fsdp={fsdp}",
        f"backend.jax.mesh.tp={tp}",
        f"backend.jax.replicate_indivisible_heads={str(replicate).lower()}",
        f"lora.dropout={dropout}",
        f"train.max_steps={STEPS}",
        "train.learning_rate=1e-2",
    )
    result = train(recipe, work / "runs" / f"g3-{fsdp}x{tp}", progress=False, backend="jax")
    assert np.mean(result.losses[-3:]) < result.losses[0] - MARGIN, result.losses
