"""The PyTorch backend (TRL + PEFT + accelerate/FSDP2), reached only through crosstune.train.backend's registry."""
