"""A torch-backend worker that really shards with FSDP2 on CPU (run by tests/train/torch/test_train.py via torchrun).

accelerate turns FSDP into DDP on CPU (its distributed type stays MULTI_CPU), so this worker flips the type back to
FSDP once the trainer's plugin is known; everything else is the production path: TrainingArguments' fsdp_config ->
accelerate's fsdp2_prepare_model (`fully_shard` per decoder layer, gloo) -> FSDP2 gradient clipping, checkpoints and
adapter gathering. One CPU-only difference: accelerate gathers the full state dict with `cpu_offload=True`, which on
CPU hands back views of FSDP's freed all-gather buffers; here they are copied instead. The worker also records what
fully_shard produced (<run>/fsdp_probe.json) so the test can see the model really was sharded, and that its base
parameters were still on the meta device then (each rank reads only its shard afterwards: sharded_load.py).
"""

import dataclasses
import json
import sys
from pathlib import Path

import accelerate.state as accelerate_state
import torch.distributed as dist
import torch.distributed.checkpoint.state_dict as dcp_state_dict
from accelerate.utils import DistributedType, fsdp_utils

import crosstune.train.torch.model as torch_model

_init = accelerate_state.AcceleratorState.__init__


def _fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin
        accelerate_state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP


_get_model_state_dict = dcp_state_dict.get_model_state_dict


def _copied_state_dict(model, *, submodules=None, options=None):
    if options is not None and options.cpu_offload:
        options = dataclasses.replace(options, cpu_offload=False)
    state = _get_model_state_dict(model, submodules=submodules, options=options)
    return {k: v.clone() for k, v in state.items()}


_prepare = fsdp_utils.fsdp2_prepare_model


def _probe(accelerator, model):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    meta_before = [n for n, p in model.named_parameters() if p.is_meta]
    model = _prepare(accelerator, model)
    units = [type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)]
    lora = [(n, p) for n, p in model.named_parameters() if "lora_A" in n]
    name, param = lora[0]
    probe = {
        "fsdp_units": units,
        "all_params_dtensor": all(isinstance(p, DTensor) for p in model.parameters()),
        "lora_param": name,
        "global_shape": list(param.shape),
        "local_shape": list(param.to_local().shape),
        "params": sum(1 for _ in model.parameters()),
        "meta_before_shard": len(meta_before),  # no rank ever held these whole: each reads its shard afterwards
        "lora_meta_before_shard": sum(".lora_" in n for n in meta_before),
    }
    if dist.get_rank() == 0:
        run_dir = Path(sys.argv[1]).parents[1]  # <run>/launch/context.json
        (run_dir / "fsdp_probe.json").write_text(json.dumps(probe, indent=2))
    return model


accelerate_state.AcceleratorState.__init__ = _fsdp_on_cpu
torch_model.SHARDING_DEVICES = ("cuda", "cpu")  # FSDP2 really shards here: ranks read only their shards
dcp_state_dict.get_model_state_dict = _copied_state_dict
fsdp_utils.fsdp2_prepare_model = _probe
import accelerate.accelerator  # noqa: E402  (it imported fsdp2_prepare_model by name)

accelerate.accelerator.fsdp2_prepare_model = _probe

from crosstune.train.torch.launch import main  # noqa: E402

main(sys.argv[1:])
