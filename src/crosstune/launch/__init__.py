"""`crosstune launch`: job specs that run `crosstune study` on the engines users already run — a SkyPilot task (TPU
VM or GPU box), a GKE JobSet (TPU slice, JAX multi-controller), an sbatch script (Slurm GPU nodes, FSDP2) — and
their hand-off to that engine's own CLI."""
