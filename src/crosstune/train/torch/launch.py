"""Multi-device / multi-node launch of the torch backend: crosstune writes the accelerate config and starts the
workers itself, so nobody edits accelerate YAML.

GPUs: `accelerate launch --config_file <run>/launch/accelerate.yaml -m crosstune.train.torch.launch
<run>/launch/context.json`
(FSDP2 when `backend.torch.fsdp`, else DDP). CPU (development, tests): accelerate starts several CPU processes only
through MPI and can't shard on CPU anyway, so crosstune starts the same workers with torchrun over gloo (DDP).
Each worker reads the session's RunContext from <run>/launch/context.json and runs `train_in_process`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.emit import yaml_text
from crosstune.recipe import Recipe
from crosstune.recipe.training_arguments import fsdp_settings
from crosstune.run.metrics import read_metrics
from crosstune.train.backend import RunContext
from crosstune.train.torch.config import parallelism

DEFAULT_PORT = 29500
LAUNCH = "launch"
console = Console(soft_wrap=True, highlight=False, markup=False)


def split_address(main_address: str | None, nodes: int) -> tuple[str, int]:
    """`host[:port]` of node 0 (required with several nodes; localhost otherwise)."""
    if main_address is None:
        if nodes > 1:
            raise ValueError("--main-address HOST[:PORT] of node 0 is required with --nodes > 1")
        return "127.0.0.1", DEFAULT_PORT
    host, _, port = main_address.rpartition(":") if ":" in main_address else (main_address, "", "")
    return host, int(port) if port else DEFAULT_PORT


def accelerate_config(recipe: Recipe, *, node_rank: int = 0, main_address: str | None = None) -> dict[str, Any]:
    """The accelerate config (YAML keys) for the recipe's devices × nodes on GPUs."""
    tb = recipe.backend.torch
    host, port = split_address(main_address, tb.nodes)
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP" if tb.fsdp else "MULTI_GPU",
        "num_processes": tb.devices * tb.nodes,  # all machines together
        "num_machines": tb.nodes,
        "machine_rank": node_rank,
        "main_process_ip": host,
        "main_process_port": port,
        "rdzv_backend": "static",
        "same_network": True,
        "mixed_precision": "bf16" if recipe.train.precision == "bf16" else "no",
        "use_cpu": False,
        "gpu_ids": "all",
        "debug": False,
    }
    if tb.fsdp:
        fsdp = fsdp_settings(recipe)
        config["fsdp_config"] = {
            "fsdp_version": fsdp["version"],
            "fsdp_auto_wrap_policy": fsdp["auto_wrap_policy"],
            "fsdp_transformer_layer_cls_to_wrap": ",".join(fsdp["transformer_layer_cls_to_wrap"]),
            "fsdp_reshard_after_forward": fsdp["reshard_after_forward"],
            "fsdp_state_dict_type": fsdp["state_dict_type"],
            "fsdp_activation_checkpointing": fsdp["activation_checkpointing"],
            "fsdp_cpu_ram_efficient_loading": fsdp["cpu_ram_efficient_loading"],
            "fsdp_offload_params": False,
        }
    return config


def worker_command(
    recipe: Recipe, context_file: Path, *, node_rank: int, main_address: str | None, on_gpu: bool
) -> list[str]:
    """The launcher command line for this node (writes the accelerate config on GPUs)."""
    tb = recipe.backend.torch
    worker = ["-m", "crosstune.train.torch.launch", str(context_file)]
    if on_gpu:
        config_file = context_file.parent / "accelerate.yaml"
        config = accelerate_config(recipe, node_rank=node_rank, main_address=main_address)
        config_file.write_text(yaml_text(config))
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file), *worker]
    host, port = split_address(main_address, tb.nodes)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={tb.devices}",
        f"--nnodes={tb.nodes}",
        f"--node-rank={node_rank}",
        f"--master-addr={host}",
        f"--master-port={port}",
        *worker,
    ]


def write_worker_context(context: RunContext) -> Path:
    """<run>/launch/context.json: the session's RunContext, for every worker of this node."""
    path = context.run_dir / LAUNCH / "context.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(context.to_json())
    return path


def launch_workers(context: RunContext, *, node_rank: int = 0, main_address: str | None = None) -> int:
    """Start `devices` workers on this node (one of `nodes`) and wait for them; returns the last step the run's
    metrics hold (the step of the final adapter the workers saved)."""
    import torch

    tb = context.recipe.backend.torch
    on_gpu = torch.cuda.is_available()
    if on_gpu and torch.cuda.device_count() < tb.devices:
        raise RuntimeError(f"backend.torch.devices={tb.devices} but this node has {torch.cuda.device_count()} GPUs")
    context_file = write_worker_context(context)
    cmd = worker_command(context.recipe, context_file, node_rank=node_rank, main_address=main_address, on_gpu=on_gpu)
    what = parallelism(context.recipe, tb.devices * tb.nodes, on_gpu)
    console.print(f"[launch] {tb.devices} × {tb.nodes} workers, {what}: {' '.join(cmd)}")
    env = dict(os.environ)
    if not on_gpu:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // tb.devices)))
    done = subprocess.run(cmd, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training workers failed (exit {done.returncode}); their output is above")
    rows = read_metrics(context.run_dir)
    return rows[-1].step if rows else 0


def main(argv: list[str] | None = None) -> None:
    """Worker entry point (one per device): train this rank's part of the run the context file describes."""
    import argparse

    from crosstune.train.torch.worker import train_in_process

    parser = argparse.ArgumentParser(prog="crosstune.train.torch.launch")
    parser.add_argument("context", type=Path, help="<run>/launch/context.json, written by the launcher")
    ns = parser.parse_args(argv)
    train_in_process(RunContext.from_json(ns.context.read_text()))


if __name__ == "__main__":
    main()
