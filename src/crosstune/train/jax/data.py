"""JAX input side: multi-host start-up, the Grain view of the prepared data, and the step/epoch arithmetic.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.train.jax.data"."""

from __future__ import annotations

import os

import numpy as np

from crosstune.data import PreparedDataset, grain_dataset
from crosstune.recipe.schema import Recipe
from crosstune.train.step_plan import StepPlan

# XLA's CPU client sizes its thread pool max($NPROC or the core count, the device count), and how a step's float
# sums are split follows that size: the same run on 2 or 8 fake devices (or 2 or 16 cores) rounds differently from
# step 3 on, which moved the demo's jax pass@1 by 10 points (docs/BENCHMARKS.md "The demo"). 8 is the pool `make`
# and the tests already had on this machine kind (8 fake devices on 2 cores), so their numbers stay.
CPU_THREAD_POOL = 8


def configure_cpu_xla(count: int) -> None:
    """Before JAX starts on CPU: `count` fake devices for the mesh (--xla_force_host_platform_device_count, unless
    XLA_FLAGS names a count) and XLA's thread pool pinned to CPU_THREAD_POOL (NPROC, unless set), so a CPU run's
    bits depend on neither the device count nor the machine's cores. Once JAX is imported it's too late for both:
    nothing is changed (the backend then says how to set the device count)."""
    import sys

    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if count > 1 and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    os.environ.setdefault("NPROC", str(CPU_THREAD_POOL))  # read by XLA's DefaultThreadPoolSize (xla/pjrt/cpu)


def maybe_initialize_distributed() -> bool:
    """Call `jax.distributed.initialize` when launched as one of several processes (see the module docstring).
    Must run before the first use of a device. Returns whether this is a multi-process run."""
    import jax

    env = os.environ
    if env.get("JAX_COORDINATOR_ADDRESS"):
        if not jax.distributed.is_initialized():
            jax.distributed.initialize(
                coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
                num_processes=int(env["JAX_NUM_PROCESSES"]),
                process_id=int(env["JAX_PROCESS_ID"]),
            )
        return True
    gke_pod = len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1
    if env.get("CROSSTUNE_MULTIHOST") == "1" or gke_pod:
        if not jax.distributed.is_initialized():
            jax.distributed.initialize()  # coordinator, process ids and peers from the cluster (TPU metadata, ...)
        return True
    return False


def global_sum(values: np.ndarray) -> np.ndarray:
    """Sum an int vector over all processes (identity in a single-process run)."""
    import jax

    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(values))).sum(axis=0)


def global_batch(local: dict, mesh) -> dict:
    """This process's rows -> global arrays split over fsdp (rows of all processes, in process order). Tunix's own
    `shard_input` checks divisibility on the LOCAL batch and, when a process holds fewer rows than fsdp, silently
    replicates each process's rows as if they were the whole batch; arrays already sharded pass through it."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec("fsdp"))
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local.items()}


def train_dataset(recipe: Recipe, plan: StepPlan, prepared: PreparedDataset):
    """The Grain MapDataset of this process's micro-batches, in the order shared with the torch backend."""
    import jax

    return grain_dataset(
        prepared,
        "train",
        batch_size=plan.local_batch,
        seed=recipe.train.seed,
        epochs=plan.epochs_read,
        rank=jax.process_index(),
        world_size=jax.process_count(),
    )
