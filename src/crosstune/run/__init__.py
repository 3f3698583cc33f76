"""The run directory and the LoRA formats: what training leaves behind and every later stage reads.

layout.py (file names, the readers of recipe.yaml and the checkpoint folders), records.py (run.json's schema, writer
and reader), rundir.py (claiming a run directory, starting its record), metrics.py (metrics.jsonl's schema, writer
and reader; the memory unit), integrity.py (checksums), resume.py (what --resume may change), plot.py (loss.png);
lora_weights.py (LoraWeights and PEFT adapters), shards.py (safetensors headers and tensors), base_checkpoint.py (an HF
model folder's safetensors, checked).
"""
