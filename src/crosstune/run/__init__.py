"""The run directory and the LoRA formats: what training leaves behind and every later stage reads.

layout.py (file names, the readers of run.json, recipe.yaml and the checkpoint folders), rundir.py (claiming a run
directory, writing its metadata), metrics.py (metrics.jsonl's names, definitions, writer and reader), integrity.py
(checksums), resume.py (what --resume may change), plot.py (loss.png); lora.py (LoraWeights and PEFT adapters),
shards.py (safetensors headers and tensors), base_checkpoint.py (an HF model folder's safetensors, checked).
"""
