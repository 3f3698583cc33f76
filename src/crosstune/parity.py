"""`crosstune parity RECIPE`: the two backends compute the same training step.

Both load the recipe's HF base (float32), get the SAME LoRA weights (random, B non-zero so gradients flow; made in
the PEFT layout and imported into Qwix exactly, crosstune.export.jax_lora), and read the same first micro-batch of
the prepared data through their own adapters. Each computes the loss and the LoRA gradients with its own training
code (torch: the CrosstuneSFTTrainer's dataloader, collator and compute_loss; jax: jax_step's model_inputs and
loss_fn), then takes one AdamW step with the recipe's betas, eps, weight decay and clipping at the peak learning
rate (the schedule's warmup would make step 1 a no-op), and the loss is computed again.

Layout: PEFT gives k and v independent A matrices; tunix's kv_einsum shares one. The JAX side therefore holds each
kv LoRA as the exact rank-2r block LoRA, its off-diagonal gradient blocks masked to zero, so both sides train the
same function with the same parameters. Gradients are compared tensor by tensor in the PEFT layout.

AdamW's first step moves every element by about lr·sign(g). The few elements whose gradient is at the fp32 noise
floor (the backends disagree on its sign; one in ~5·10⁴ on the tiny Gemma 4) would move ±lr by chance, and one such
element moved the loss by 1.3e-4: they are frozen on both sides for the step and counted in the table. They can't
hide a bug: an element whose sign differs has |g| <= |Δg|, which the gradient check bounds.
LoRA dropout is set to 0 (random masks can't match across frameworks).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from crosstune.errors import read_model_config
from crosstune.export.lora import LoraWeights, module_target
from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec

console = Console(soft_wrap=True, highlight=False)

LOSS_TOL = 1e-4  # fp32, on a mean cross-entropy of ~7
GRAD_RTOL = 1e-3  # per tensor: max |Δg| <= GRAD_RTOL · max |g| (+ GRAD_ATOL)
GRAD_ATOL = 1e-7


@dataclass
class GradDiff:
    module: str
    part: str  # "A" | "B"
    max_abs: float  # max |g_torch - g_jax|
    scale: float  # max |g_torch|

    @property
    def ok(self) -> bool:
        return self.max_abs <= GRAD_ATOL + GRAD_RTOL * self.scale


@dataclass
class ParityReport:
    family: str
    rows: int
    tokens: dict[str, int]  # trained tokens per backend
    loss: dict[str, float]  # before the step
    loss_after: dict[str, float]
    frozen: int = 0  # gradient elements whose sign the backends disagree on (frozen for the step)
    elements: int = 0  # LoRA parameters in all
    weight_diff: float = 0.0  # max |Δ| of the LoRA weights after the step
    grads: list[GradDiff] = field(default_factory=list)

    @property
    def loss_diff(self) -> float:
        return abs(self.loss["torch"] - self.loss["jax"])

    @property
    def loss_after_diff(self) -> float:
        return abs(self.loss_after["torch"] - self.loss_after["jax"])

    @property
    def ok(self) -> bool:
        return (
            self.tokens["torch"] == self.tokens["jax"]
            and self.loss_diff <= LOSS_TOL
            and self.loss_after_diff <= LOSS_TOL
            and all(g.ok for g in self.grads)
        )


def parity_lora(spec: ModelSpec, rank: int, alpha: float, targets: list[str], seed: int) -> LoraWeights:
    """Random LoRA weights in the PEFT layout: A ~ N(0, 1/in), B ~ N(0, 0.02²) (non-zero, unlike an init),
    independent for every module (so k and v have different A)."""
    rng = np.random.default_rng(seed)
    fam = get_family(spec.family)
    modules = {}
    for name in fam.hf_lora_modules(spec, targets):
        layer, target = module_target(name)
        out, fan_in = spec.projection_shapes(layer)[target]
        a = (rng.standard_normal((rank, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
        b = (rng.standard_normal((out, rank)) * 0.02).astype(np.float32)
        modules[name] = (a, b)
    present = tuple(t for t in HF_TARGET_MODULES if t in targets)
    return LoraWeights(spec.family, rank, float(alpha), present, modules)


def _load(recipe_file: Path, overrides: list[str]):
    from crosstune.recipe import load_recipe

    fixed = ["lora.dropout=0.0", "train.gradient_checkpointing=false", "model.dtype=float32"]
    return load_recipe(recipe_file, [*(overrides or []), *fixed])


def run_parity(
    recipe_file: Path, overrides: list[str] | None = None, seed: int = 0, log: Callable[[str], None] = lambda _: None
) -> ParityReport:
    """Load, step and compare both backends on the recipe (see the module docstring); `log` hears each phase."""

    from crosstune.data import prepare_dataset
    from crosstune.recipe import resolve_path

    recipe = _load(recipe_file, overrides or [])
    base = resolve_path(recipe, recipe.model.path)
    if base is None or not (base / "config.json").is_file():
        raise FileNotFoundError(f"model.path: no HF checkpoint at {base}")
    spec = get_family(recipe.model.family).spec_from_hf_config(read_model_config(base))
    log("preparing data")
    prepared = prepare_dataset(recipe)
    rows = recipe.train.per_device_batch_size * recipe.backend.jax.mesh.fsdp
    lora = parity_lora(spec, recipe.lora.rank, recipe.lora.alpha, list(recipe.lora.targets), seed)
    log("loading the torch model (TRL + PEFT)")
    torch_side = _TorchSide(recipe, prepared, lora, rows)
    log("loading the jax model (Tunix + Qwix)")
    jax_side = _JaxSide(recipe, base, spec, prepared, lora, rows)
    log("loss and gradients")
    loss_t, grads_t = torch_side.loss_and_grads()
    loss_j, grads_j = jax_side.loss_and_grads()
    freeze = undetermined_signs(grads_t, grads_j)
    log("one AdamW step")
    after_t, weights_t = torch_side.step(freeze)
    after_j, weights_j = jax_side.step(freeze)
    report = ParityReport(
        recipe.model.family,
        rows,
        tokens={"torch": torch_side.tokens, "jax": jax_side.tokens},
        loss={"torch": loss_t, "jax": loss_j},
        loss_after={"torch": after_t, "jax": after_j},
        frozen=int(sum(f.sum() for pair in freeze.values() for f in pair)),
        elements=int(sum(a.size + b.size for a, b in lora.modules.values())),
        weight_diff=max(float(np.abs(weights_t[m][i] - weights_j[m][i]).max()) for m in lora.modules for i in (0, 1)),
    )
    for name in lora.modules:
        for part, i in (("A", 0), ("B", 1)):
            gt, gj = grads_t[name][i], grads_j[name][i]
            report.grads.append(GradDiff(name, part, float(np.abs(gt - gj).max()), float(np.abs(gt).max())))
    return report


def _step_train(recipe):
    """The recipe's optimizer settings at a constant peak learning rate (no warmup: one step)."""
    return recipe.train.model_copy(update={"schedule": "constant", "warmup_steps": 0})


def undetermined_signs(torch_grads: dict, jax_grads: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per module, 1 where the backends' gradient signs disagree (the element is at the fp32 noise floor), else 0.

    AdamW's first step moves every element by about lr·sign(g): an element whose sign fp32 rounding decides would
    move ±lr depending on the backend. Such elements (typically one in 10⁴-10⁵) are frozen on both sides for the
    step; the count is reported."""
    return {
        m: tuple((np.sign(torch_grads[m][i]) != np.sign(jax_grads[m][i])).astype(np.float32) for i in (0, 1))
        for m in torch_grads
    }


class _TorchSide:
    """The torch backend's model, trainer (dataloader + collator + compute_loss) and the parity LoRA."""

    def __init__(self, recipe, prepared, lora: LoraWeights, rows: int):
        import torch

        from crosstune.data import torch_dataset
        from crosstune.export.lora import text_module_name
        from crosstune.train.torch_backend import build_model, lora_config, sft_config
        from crosstune.train.torch_callbacks import CrosstuneSFTTrainer

        torch.manual_seed(0)
        self.recipe, self.lora = recipe, lora
        model, tokenizer = build_model(recipe, on_gpu=False)
        config, _ = lora_config(recipe, model)
        dataset = torch_dataset(prepared, "train", seed=recipe.train.seed).select(range(rows))
        with tempfile.TemporaryDirectory(prefix="crosstune-parity-") as tmp:
            args = sft_config(recipe, Path(tmp), steps=1, progress=False)
            args.per_device_train_batch_size = rows
            self.trainer = CrosstuneSFTTrainer(
                model=model,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=config,
                keep_last=1,
            )
        self.model = self.trainer.model
        self.params = {}
        for name, p in self.model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                module, part = name.split(".lora_")
                self.params[(text_module_name(module.removeprefix("base_model.model.")), part[0])] = p
        if set(self.params) != {(m, part) for m in lora.modules for part in "AB"}:
            raise RuntimeError("the torch model's LoRA modules differ from the parity LoRA's (family layout mismatch)")
        with torch.no_grad():
            for (module, part), p in self.params.items():
                p.copy_(torch.from_numpy(lora.modules[module][0 if part == "A" else 1]))
        self.batch = next(iter(self.trainer.get_train_dataloader()))
        self.tokens = int((self.batch["labels"][..., 1:] != -100).sum())
        self.model.train()

    def _loss(self):
        import torch

        return self.trainer.compute_loss(self.model, dict(self.batch), num_items_in_batch=torch.tensor(self.tokens))

    def loss_and_grads(self) -> tuple[float, dict]:
        loss = self._loss()
        loss.backward()
        grads = {m: tuple(self.params[(m, p)].grad.numpy().copy() for p in "AB") for m in self.lora.modules}
        return loss.item(), grads

    def step(self, freeze: dict) -> tuple[float, dict]:
        """One AdamW step (frozen elements' gradients zeroed), then the loss; returns (loss, LoRA weights)."""
        import torch

        with torch.no_grad():
            for (m, part), p in self.params.items():
                p.grad.mul_(torch.from_numpy(1.0 - freeze[m][0 if part == "A" else 1]))
        train = _step_train(self.recipe)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if train.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(trainable, train.max_grad_norm)
        torch.optim.AdamW(
            trainable,
            lr=train.learning_rate,
            betas=(train.adam_beta1, train.adam_beta2),
            eps=train.adam_eps,
            weight_decay=train.weight_decay,
        ).step()
        with torch.no_grad():
            after = float(self._loss())
        return after, {m: tuple(self.params[(m, p)].detach().numpy().copy() for p in "AB") for m in self.lora.modules}


class _JaxSide:
    """The jax backend's tunix model with the parity LoRA imported, and its loss on the same rows."""

    def __init__(self, recipe, base: Path, spec: ModelSpec, prepared, lora: LoraWeights, rows: int):
        import jax.numpy as jnp
        from flax import nnx

        from crosstune.data import grain_dataset
        from crosstune.export.jax_lora import install_lora
        from crosstune.train.jax_model import build_model, make_mesh, mesh_context
        from crosstune.train.jax_step import device_batch, model_inputs, optimizer_steps

        self.recipe, self.spec, self.lora = recipe, spec, lora
        self.mesh = make_mesh(recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp)
        batch = grain_dataset(prepared, "train", batch_size=rows, seed=recipe.train.seed)[0]
        micro = next(optimizer_steps([batch], 1))[0]
        self.tokens = int(micro["step_trained_tokens"])
        self.inputs = {k: jnp.asarray(v) for k, v in model_inputs(device_batch(micro)).items()}
        with mesh_context(self.mesh):
            self.model, _ = build_model(recipe.model.family, base, self.mesh, dtype="float32", lora=recipe.lora)
            self.masks = install_lora(self.model, lora, spec)
        self._loss_and_grad = nnx.jit(self._loss_and_grad)  # compiled once: before and after the step

    @staticmethod
    def _loss_and_grad(model, inputs):
        from flax import nnx

        from crosstune.train.jax_step import loss_fn

        return nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam))(model, **inputs)

    def _named(self, tree) -> dict[str, np.ndarray]:
        import jax

        from crosstune.export.jax_lora import param_name

        return {param_name(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}

    def loss_and_grads(self) -> tuple[float, dict]:

        from crosstune.export.jax_lora import qwix_to_lora
        from crosstune.train.jax_model import mesh_context

        with mesh_context(self.mesh):
            loss, self.grads = self._loss_and_grad(self.model, self.inputs)
        self.flat = self._named(self.grads)
        for name, mask in self.masks.items():  # block k/v LoRAs stay exact PEFT pairs (crosstune.families.lora_layout)
            self.flat[name] = self.flat[name] * mask
        lora = self.lora
        return float(loss), qwix_to_lora(self.flat, self.spec, rank=lora.rank, alpha=lora.alpha).modules

    def step(self, freeze: dict) -> tuple[float, dict]:
        from flax import nnx

        from crosstune.export.jax_lora import lora_to_qwix, qwix_to_lora
        from crosstune.train.jax_model import mesh_context
        from crosstune.train.jax_step import make_optimizer

        lora = self.lora
        frozen, _ = lora_to_qwix(
            LoraWeights(lora.family, lora.rank, lora.alpha, lora.targets, freeze), self.spec, False
        )
        flat = {k: v * (1.0 - frozen[k]).astype(v.dtype) for k, v in self.flat.items()}
        with mesh_context(self.mesh):
            nnx.replace_by_pure_dict(self.grads, _nest(flat, self.grads))
            tx, _ = make_optimizer(_step_train(self.recipe), total_steps=1)
            optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.LoRAParam)
            nnx.jit(lambda opt, model, grads: opt.update(model, grads))(optimizer, self.model, self.grads)
            after = float(self._loss_and_grad(self.model, self.inputs)[0])
            weights = self._named(nnx.state(self.model, nnx.LoRAParam))
        return after, qwix_to_lora(weights, self.spec, rank=lora.rank, alpha=lora.alpha).modules


def _nest(flat: dict[str, np.ndarray], state) -> dict:
    """Dotted names -> the nested pure dict of `state` (for nnx.replace_by_pure_dict)."""
    import jax

    from crosstune.export.jax_lora import param_name

    return jax.tree_util.tree_map_with_path(lambda p, _: flat[param_name(p)], state.to_pure_dict())


def report_table(report: ParityReport) -> Table:
    def mark(ok: bool) -> str:
        return "[green]ok[/green]" if ok else "[red]FAIL[/red]"

    table = Table(title=f"torch vs jax: one training step ({report.family}, {report.rows} rows, fp32)")
    table.caption = (
        f"grad rows: worst layer, max |g| (torch) and max |Δg|; tolerance {GRAD_RTOL:.0e}·max|g| + {GRAD_ATOL:.0e}. "
        "Frozen: gradient elements whose sign the backends disagree on (fp32 noise floor), held for the step."
    )
    for col in ("quantity", "torch", "jax", "|Δ|", "tol", ""):
        table.add_column(col, justify="right" if col not in ("quantity", "") else "left")
    tok_ok = report.tokens["torch"] == report.tokens["jax"]
    table.add_row(
        "trained tokens",
        str(report.tokens["torch"]),
        str(report.tokens["jax"]),
        str(abs(report.tokens["torch"] - report.tokens["jax"])),
        "0",
        mark(tok_ok),
    )
    table.add_row(
        "loss",
        f"{report.loss['torch']:.6f}",
        f"{report.loss['jax']:.6f}",
        f"{report.loss_diff:.2e}",
        f"{LOSS_TOL:.0e}",
        mark(report.loss_diff <= LOSS_TOL),
    )
    by_kind: dict[tuple[str, str], list[GradDiff]] = {}
    for g in report.grads:
        by_kind.setdefault((module_target(g.module)[1], g.part), []).append(g)
    for (target, part), diffs in by_kind.items():
        worst = max(diffs, key=lambda g: g.max_abs / max(g.scale, 1e-30))
        table.add_row(
            f"∇ {target}.lora_{part} ×{len(diffs)}",
            f"{worst.scale:.2e}",
            "",
            f"{worst.max_abs:.2e}",
            f"{GRAD_ATOL + GRAD_RTOL * worst.scale:.0e}",
            mark(all(g.ok for g in diffs)),
        )
    table.add_row("frozen elements", f"{report.frozen}/{report.elements}", "", "", "", "")
    table.add_row("LoRA after step", "", "", f"{report.weight_diff:.2e}", "", "")
    table.add_row(
        "loss after step",
        f"{report.loss_after['torch']:.6f}",
        f"{report.loss_after['jax']:.6f}",
        f"{report.loss_after_diff:.2e}",
        f"{LOSS_TOL:.0e}",
        mark(report.loss_after_diff <= LOSS_TOL),
    )
    return table


def register(app: typer.Typer) -> None:
    app.command("parity")(parity)


def parity(
    recipe_file: Path = typer.Argument(..., help="recipe YAML (its model, LoRA, data, optimizer and jax mesh)"),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set lora.rank=4"),
    seed: int = typer.Option(0, help="seed of the random LoRA weights both backends get"),
) -> None:
    """Check that torch (TRL+PEFT) and jax (Tunix+Qwix) compute the same training step on the recipe: same loss,
    same LoRA gradients, same loss after one AdamW step (fp32). Exits non-zero when out of tolerance."""
    with console.status("parity") as status:
        report = run_parity(recipe_file, overrides, seed, log=lambda msg: status.update(f"parity: {msg}"))
    console.print(report_table(report))
    if not report.ok:
        console.print("[red]parity FAILED[/red]: the backends disagree beyond tolerance")
        raise typer.Exit(1)
    console.print("[green]parity ok[/green]")
