"""What the torch backend hands TRL and accelerate is the recipe: SFTConfig fields (never TRL's defaults), the
accelerate config its own reader accepts, and the worker commands for GPU (accelerate) and CPU (torchrun)."""

from __future__ import annotations

import pytest
import yaml

from crosstune.recipe import load_recipe
from tests.helpers.paths import REPO

# The training settings the assertions below read back (conftest's RECIPE has others).
AS_TRAINED = [
    "train.learning_rate=3.0e-3",
    "train.per_device_batch_size=1",
    "train.grad_accumulation=2",
    "train.checkpoint_every=2",
    "train.keep_last=5",
    "train.seed=42",
    "train.max_steps=12",
]


def test_sft_config_is_the_recipe_not_trl_defaults(recipe_path, tmp_path):
    """TRL 1.16 defaults that differ from a recipe (gradient checkpointing on, bf16 on, lr 2e-5, logging every 10
    steps, linear schedule, ...) never leak through."""
    from trl import SFTConfig

    from crosstune.train.torch.config import sft_config

    recipe = load_recipe(
        recipe_path, [*AS_TRAINED, "train.warmup_steps=3", "train.schedule=cosine", "train.log_every=2"]
    )
    args = sft_config(recipe, tmp_path, steps=12)
    t = recipe.train
    trl = {name: f.default for name, f in SFTConfig.__dataclass_fields__.items()}
    assert trl["gradient_checkpointing"] and trl["learning_rate"] == 2e-5 and trl["logging_steps"] == 10
    assert (args.gradient_checkpointing, args.bf16, args.fp16) == (False, False, False)
    assert (args.learning_rate, args.lr_scheduler_type.value, args.warmup_steps) == (3e-3, "cosine", 3)
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (t.adam_beta1, t.adam_beta2, t.adam_eps)
    assert (args.weight_decay, args.max_grad_norm, args.seed) == (t.weight_decay, t.max_grad_norm, 42)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 2)
    assert (args.max_steps, args.logging_steps, args.save_steps, args.save_total_limit) == (12, 2, 2, 5)
    assert (args.packing, args.padding_free, args.max_length, args.completion_only_loss) == (False, True, None, True)
    assert args.train_sampling_strategy == "sequential" and not args.shuffle_dataset
    assert args.average_tokens_across_devices and args.report_to == [] and args.use_cpu
    assert not args.fsdp  # one process


def test_a_warm_up_ratio_is_this_run_s_steps(recipe_path, tmp_path):
    """train.warmup_ratio reaches TRL as whole warm-up steps of this run (crosstune.train.step_plan.warmup_steps,
    the jax schedule's too): ceil(0.25 × 10) = 3."""
    from crosstune.train.torch.config import sft_config

    recipe = load_recipe(recipe_path, [*AS_TRAINED, "train.warmup_ratio=0.25"])
    args = sft_config(recipe, tmp_path, steps=10)
    assert (args.warmup_steps, args.get_warmup_steps(10)) == (3, 3)


def test_accelerate_config_and_launch_commands(recipe_path, tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig

    from crosstune.train.torch.launch import accelerate_config, worker_command

    recipe = load_recipe(recipe_path, ["backend.torch.devices=8", "backend.torch.nodes=2", "backend.torch.fsdp=true"])
    config = accelerate_config(recipe, node_rank=1, main_address="10.0.0.1:6000")
    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump(config))
    parsed = ClusterConfig.from_yaml_file(path)  # accelerate's own reader accepts every key
    assert parsed.distributed_type.value == "FSDP" and parsed.num_processes == 16 and parsed.num_machines == 2
    assert (parsed.machine_rank, parsed.main_process_ip, parsed.main_process_port) == (1, "10.0.0.1", 6000)
    assert parsed.fsdp_config["fsdp_version"] == 2
    assert parsed.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "Gemma4TextDecoderLayer"
    assert parsed.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    unified = load_recipe(REPO / "recipes" / "gemma4-12b-1xh100.yaml", ["backend.torch.fsdp=true"])  # by model.size
    assert accelerate_config(unified)["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == (
        "Gemma4UnifiedTextDecoderLayer"  # the 12B's class (gemma4_unified): accelerate refuses one the model lacks
    )

    context_file = tmp_path / "run" / "launch" / "context.json"  # the session's RunContext, for the workers
    context_file.parent.mkdir(parents=True)
    gpu = worker_command(recipe, context_file, node_rank=1, main_address="10.0.0.1", on_gpu=True)
    assert gpu[1:4] == ["-m", "accelerate.commands.launch", "--config_file"] and gpu[-1] == str(context_file)
    assert (tmp_path / "run" / "launch" / "accelerate.yaml").is_file()
    cpu = worker_command(recipe, context_file, node_rank=0, main_address="h0", on_gpu=False)
    assert "torch.distributed.run" in cpu and "--nproc-per-node=8" in cpu and "--master-addr=h0" in cpu
    with pytest.raises(ValueError, match="--main-address"):
        accelerate_config(recipe)  # two nodes need the address of node 0
