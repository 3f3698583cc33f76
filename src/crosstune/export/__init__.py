"""Export: any run directory -> a PEFT adapter and/or a merged HF checkpoint (streamed shard by shard), and the
JAX <-> PEFT LoRA conversions that tie the two backends together."""

from crosstune.export.export_folder import staged_dir, verify_manifest
from crosstune.export.merge import merge_lora_into_shards
from crosstune.export.run_export import export_run, load_run_lora
from crosstune.run.lora_weights import ExportError, LoraWeights, read_peft_adapter, write_peft_adapter

__all__ = [
    "ExportError",
    "LoraWeights",
    "export_run",
    "load_run_lora",
    "merge_lora_into_shards",
    "read_peft_adapter",
    "staged_dir",
    "verify_manifest",
    "write_peft_adapter",
]
