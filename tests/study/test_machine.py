"""What the manifest records about a host: CUDA devices through nvidia-smi, a TPU through GKE's environment; and who
is a worker process of a several-process run."""

from __future__ import annotations

from crosstune.study.machine import accelerator_summary, describe_machine
from crosstune.study.runner import is_worker

NVIDIA_SMI = """#!/bin/bash
[ "$1" = --query-gpu=name,memory.total,driver_version ] || exit 2
echo "NVIDIA H100 80GB HBM3, 81559 MiB, 570.86.15"
echo "NVIDIA H100 80GB HBM3, 81559 MiB, 570.86.15"
"""


def test_cuda_devices_come_from_nvidia_smi(tmp_path, monkeypatch):
    (tmp_path / "nvidia-smi").write_text(NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    info = describe_machine()
    assert info["cuda"] == [{"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB", "driver": "570.86.15"}] * 2
    assert accelerator_summary(info) == "2 × NVIDIA H100 80GB HBM3"


def test_a_gke_tpu_host_is_described_by_its_environment_and_host_1_is_a_worker(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for key, value in {"TPU_ACCELERATOR_TYPE": "v5p-16", "TPU_WORKER_ID": "1", "TPU_TOPOLOGY": "2x2x2"}.items():
        monkeypatch.setenv(key, value)
    info = describe_machine()
    assert info["tpu"]["env"] == {"TPU_ACCELERATOR_TYPE": "v5p-16", "TPU_TOPOLOGY": "2x2x2", "TPU_WORKER_ID": "1"}
    assert accelerator_summary(info).startswith("v5p-16 (")
    assert is_worker({}) and is_worker({"node_rank": 0})  # TPU_WORKER_ID=1: a worker whatever the torch rank
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    assert not is_worker({}) and is_worker({"node_rank": 1})


def test_the_cpu_is_recorded_by_its_id_vector_units_and_load():
    """The demo's figures depend on the CPU kind (docs/BENCHMARKS.md "The demo"): the bundle names it, and the load."""
    from crosstune.study.machine import ISA_FLAGS

    cpu = describe_machine()["cpu"]
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split(":", 1)[1].split()
    assert cpu["isa"] == [f for f in ISA_FLAGS if f in flags]
    assert "cpu family" in cpu["id"] and cpu["model"] in open("/proc/cpuinfo").read()
    assert len(cpu["load_avg"]) == 3 and all(x >= 0 for x in cpu["load_avg"])
