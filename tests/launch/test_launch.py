"""`crosstune launch`: SkyPilot task YAMLs (checked by SkyPilot's own task loader), a GKE JobSet for a 2-host v5p-16
(checked against JobSet's documented v1alpha2 format, its pod templates by Kubernetes' own models), an sbatch script
for 2 nodes × 8 GPUs (bash's parser, sbatch's documented directives, and the script run with srun/scontrol stubs),
and --submit without the engine's CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.launch_specs import H100, K8S_ROUND_TRIP, SKY_LOAD, SRUN_STUB, V5P, fails, in_launch_env, launch
from tests.helpers.paths import REPO

SKY_CASES = [  # the accelerator's packages on top of the lock (PyPI's torch is the CUDA build: the lock's pin)
    (V5P, "tpu-v5p-8", {"tpu-v5p-8": 1}, "uv pip install --python .venv/bin/python 'jax[tpu]==0.10.2'"),
    (H100, "2xh100", {"H100": 2}, 'uv pip install --python .venv-serve/bin/python "vllm==0.32.0"'),
]


def test_skypilot_specs_for_tpu_v5p_8_and_2xh100_are_accepted_by_skypilot_s_own_task_loader(tmp_path):
    specs = []
    for recipe, target, _, wheel in SKY_CASES:
        spec = tmp_path / f"{target}.yaml"
        launch(recipe, "--on", "skypilot", "--target", target, "--out", str(spec), "--bucket", "gs://my-bundles")
        text = spec.read_text()
        data = yaml.safe_load(text)
        assert re.match(r"# crosstune \S+: `crosstune study` of \S+ \(recipe hash [0-9a-f]{16}\)", text)
        assert data["envs"]["CROSSTUNE_RECIPE_HASH"] in text.splitlines()[0] and data["envs"]["CROSSTUNE_VERSION"]
        lock = "requirements-jax.lock" if target.startswith("tpu") else "requirements.lock"  # no torch on a TPU host
        assert f"python3 -m uv pip install --python .venv/bin/python -r {lock}\n" in data["setup"]
        assert wheel in data["setup"]
        assert not re.search(r"(-f|--find-links|--index-url|--extra-index-url) ", data["setup"])  # PyPI alone
        backend = "jax" if target.startswith("tpu") else "torch"
        assert f".venv/bin/crosstune study {recipe} --backend {backend} --set hardware={target} --out" in data["run"]
        assert data["file_mounts"] == {"/crosstune-bucket": {"name": "my-bundles", "mode": "MOUNT"}}
        specs.append((spec, data))
    control = tmp_path / "misspelled.yaml"  # the control: the same loader refuses a misspelled section
    control.write_text(specs[1][0].read_text().replace("resources:", "resource:"))
    loaded = in_launch_env(SKY_LOAD, *(str(spec) for spec, _ in specs), str(control))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    *tasks, refused = [json.loads(line) for line in loaded.stdout.splitlines() if line.startswith("{")]
    for task, (_spec, data), (_, target, accelerators, _) in zip(tasks, specs, SKY_CASES, strict=True):
        assert "error" not in task, task
        assert task["accelerators"] == accelerators and task["name"] == data["name"]
        assert task["mounts"] == ["/crosstune-bucket"] and task["run"] == data["run"]
        if target.startswith("tpu"):
            assert task["args"] == {"runtime_version": "v2-alpha-tpuv5", "tpu_vm": True}
    assert "resource" in refused["error"]


# --- GKE: JobSet v1alpha2, as documented (jobset.sigs.k8s.io API reference, api/jobset/v1alpha2/jobset_types.go) ---
JOBSET_SPEC = {
    "replicatedJobs",
    "network",
    "successPolicy",
    "failurePolicy",
    "startupPolicy",
    "suspend",
    "coordinator",
    "managedBy",
    "ttlSecondsAfterFinished",
    "volumeClaimPolicies",
}
NETWORK = {"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"}
FAILURE_POLICY = {"maxRestarts", "restartStrategy", "rules"}
REPLICATED_JOB = {"name", "groupName", "template", "replicas", "dependsOn"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def jobset_problems(doc: dict) -> list[str]:
    problems = []
    if (doc.get("apiVersion"), doc.get("kind")) != ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        problems.append(f"apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')}")
    if not DNS_LABEL.match(doc.get("metadata", {}).get("name", "")):
        problems.append("metadata.name is not a DNS label")
    spec = doc.get("spec", {})
    problems += [f"spec.{k}: unknown" for k in set(spec) - JOBSET_SPEC]
    problems += [f"spec.network.{k}: unknown" for k in set(spec.get("network", {})) - NETWORK]
    problems += [f"spec.failurePolicy.{k}: unknown" for k in set(spec.get("failurePolicy", {})) - FAILURE_POLICY]
    seen: list[str] = []
    for i, rj in enumerate(spec.get("replicatedJobs") or []):
        where = f"spec.replicatedJobs[{i}]"
        problems += [f"{where}.{k}: unknown" for k in set(rj) - REPLICATED_JOB]
        if not DNS_LABEL.match(rj.get("name", "")) or "template" not in rj:
            problems.append(f"{where}: needs a DNS-label name and a template")
        if not isinstance(rj.get("replicas", 1), int) or rj.get("replicas", 1) < 0:
            problems.append(f"{where}.replicas: a non-negative integer")
        deps = rj.get("dependsOn") or []
        if deps and (i == 0 or len(deps) > 1):
            problems.append(f"{where}.dependsOn: the first job can't depend, the others on one job only")
        for d in deps:
            if set(d) != {"name", "status"} or d["status"] not in ("Ready", "Complete") or d["name"] not in seen:
                problems.append(f"{where}.dependsOn: {d} is not {{name: an earlier job, status: Ready|Complete}}")
        job = rj.get("template", {}).get("spec", {})
        if job.get("parallelism", 1) > 1 and job.get("completionMode") != "Indexed":
            problems.append(f"{where}: several pods need completionMode Indexed (JOB_COMPLETION_INDEX)")
        seen.append(rj.get("name", ""))
    if not seen:
        problems.append("spec.replicatedJobs: empty")
    return problems


def test_gke_spec_for_a_2_host_v5p_16_is_a_jobset_that_runs_the_study_on_every_host(tmp_path):
    spec = tmp_path / "jobset.yaml"
    image = "us-docker.pkg.dev/p/r/crosstune-tpu:0.1.0"
    args = [V5P, "--on", "gke", "--target", "tpu-v5p-16", "--set", "backend.jax.mesh.fsdp=2", "--image", image]
    launch(*args, "--bucket", "my-hns-bucket", "--out", str(spec))
    doc = yaml.safe_load(spec.read_text())
    assert jobset_problems(doc) == []
    prepare, slice_job = doc["spec"]["replicatedJobs"]
    assert slice_job["dependsOn"] == [{"name": "prepare", "status": "Complete"}]
    job = slice_job["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (2, 2, "Indexed")
    pod = job["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"google.com/tpu": 4}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (
        env["CROSSTUNE_MULTIHOST"] == "1"
        and env["CROSSTUNE_RECIPE_HASH"] == doc["metadata"]["annotations"]["crosstune/recipe-hash"]
    )
    script = container["command"][2]
    study = f"crosstune study {V5P} --backend jax --set backend.jax.mesh.fsdp=2 --set hardware=tpu-v5p-16"
    assert f"{study} --only train --out /bundles/" in script  # every host
    assert f'if [ "${{TPU_WORKER_ID:-${{JOB_COMPLETION_INDEX:-0}}}}" = 0 ]; then {study} --from export' in script
    assert (
        f"{study} --only prepare,plan --out /bundles/"
        in prepare["template"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    broken = json.loads(json.dumps(doc))
    broken["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "later", "status": "Done"}]
    broken["spec"]["replicatedJobs"][1]["template"]["spec"]["completionMode"] = "NonIndexed"
    assert len(jobset_problems(broken)) == 2  # the check can fail
    checked = in_launch_env(K8S_ROUND_TRIP, stdin=json.dumps(doc))
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert json.loads(checked.stdout.splitlines()[-1]) == []  # every field of the pod templates is Kubernetes'
    broken = json.loads(json.dumps(doc))
    broken["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelecter"] = {"pool": "tpu"}
    checked = in_launch_env(K8S_ROUND_TRIP, stdin=json.dumps(broken))
    assert "nodeSelecter" in checked.stdout  # the control: a misspelled field is caught


def test_gke_refuses_what_the_slice_can_t_run():
    image = ["--image", "img", "--bucket", "bkt", "--out", "x.yaml"]
    assert "fsdp × tp = 1×4 = 4, but tpu-v5p-16 has 8 devices" in fails(
        V5P, "--on", "gke", "--target", "tpu-v5p-16", *image
    )
    assert "--on gke runs TPU slices" in fails(H100, "--on", "gke", *image)
    assert "give the volume every host writes the bundle to" in fails(V5P, "--on", "gke", "--image", "i", "--out", "x")
    assert "launch it as a multi-host slice with --on gke" in fails(
        V5P, "--on", "skypilot", "--target", "tpu-v5p-16", "--set", "backend.jax.mesh.fsdp=2", "--out", "x.yaml"
    )


# --- Slurm ---------------------------------------------------------------------------------------------------------
SBATCH_OPTIONS = {
    "job-name",
    "nodes",
    "ntasks-per-node",
    "gpus-per-node",
    "exclusive",
    "output",
    "time",
    "account",
    "partition",
    "cpus-per-task",
    "mem",
    "gres",
    "requeue",
    "open-mode",
}  # sbatch(1) long options


def test_slurm_script_for_2_nodes_of_8_gpus(tmp_path):
    script = tmp_path / "study.sbatch"
    launch(H100, "--on", "slurm", "--target", "8xh100", "--nodes", "2", "--out", str(script))
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)=?(\S*)", text, re.M))
    assert set(directives) <= SBATCH_OPTIONS
    assert (directives["nodes"], directives["ntasks-per-node"], directives["gpus-per-node"]) == ("2", "1", "8")
    assert re.search(r"recipe hash [0-9a-f]{16}", text) and "export CROSSTUNE_VERSION=" in text
    # Run it with srun (one task per node, SLURM_NODEID set), scontrol and crosstune stubbed: what each node runs.
    bin_dir, home = tmp_path / "bin", tmp_path / "checkout"
    (home / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    record = f'#!/bin/bash\necho "node $SLURM_NODEID: $*" >> {tmp_path}/ran\n'
    stubs = {
        bin_dir / "srun": SRUN_STUB,
        bin_dir / "scontrol": "#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n",
        home / ".venv" / "bin" / "crosstune": record,
    }
    for path, body in stubs.items():
        path.write_text(body)
        path.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CROSSTUNE_HOME": str(home),
        "SLURM_JOB_NODELIST": "gpu-[a-b]",
    }
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    study = (
        f"study {H100} --backend torch --set backend.torch.nodes=2 --set backend.torch.devices=8 --set hardware=8xh100"
    )
    bundle = f"{home}/bundles/gemma4-31b-2xh100-torch-8xh100"
    assert (tmp_path / "ran").read_text().splitlines() == [
        f"node 0: {study} --only prepare,plan --out {bundle}",
        f"node 0: {study} --only train --out {bundle} --node-rank 0 --main-address gpu-a:29500",
        f"node 1: {study} --only train --out {bundle} --node-rank 1 --main-address gpu-a:29500",
        f"node 0: {study} --from export --out {bundle}",
    ]


def test_submit_hands_the_spec_to_the_engine_s_cli_or_says_how_to_install_it(tmp_path, monkeypatch):
    """Whatever engines this host has installed, the test sees only the ones it made: PATH is a folder of its own."""
    spec, engines = tmp_path / "study.sbatch", tmp_path / "engines"
    engines.mkdir()
    monkeypatch.setenv("PATH", str(engines))
    out = fails(H100, "--on", "slurm", "--out", str(spec), "--submit")
    assert "--submit needs `sbatch`, which is not installed here: submit from a Slurm login node" in out
    assert spec.is_file()  # written before the hand-off
    (engines / "sbatch").write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/submitted\n')
    (engines / "sbatch").chmod(0o755)
    launch(H100, "--on", "slurm", "--out", str(spec), "--submit")
    assert (tmp_path / "submitted").read_text().split() == [str(spec)]
    monkeypatch.setenv("CROSSTUNE_LAUNCH_VENV", str(tmp_path / "none"))
    assert "--submit needs `sky`" in fails(H100, "--on", "skypilot", "--out", str(tmp_path / "t.yaml"), "--submit")
    assert "make launch-env" in fails(H100, "--on", "skypilot", "--out", str(tmp_path / "t.yaml"), "--submit")


def test_a_file_crosstune_did_not_write_is_never_replaced(tmp_path):
    mine = tmp_path / "notes.yaml"
    mine.write_text("my notes\n")
    assert f"--out {mine} exists and is not a file crosstune launch wrote" in fails(
        H100, "--on", "skypilot", "--out", str(mine)
    )
    assert mine.read_text() == "my notes\n"
    spec = tmp_path / "spec.yaml"
    launch(H100, "--on", "skypilot", "--out", str(spec))
    launch(H100, "--on", "skypilot", "--out", str(spec))  # its own spec, unchanged: replaced
    spec.write_text(spec.read_text().replace("setup:", "# my note\nsetup:", 1))  # edited since: kept
    assert f"--out {spec} exists and has changed since crosstune launch wrote it" in fails(
        H100, "--on", "skypilot", "--out", str(spec)
    )
    assert "# my note" in spec.read_text()
    outside = tmp_path / "r.yaml"
    outside.write_text((REPO / H100).read_text())
    assert "is outside this directory" in fails(str(outside), "--on", "skypilot", "--out", str(tmp_path / "t.yaml"))


def test_the_launch_environment_is_separate_from_the_training_one():
    """skypilot pins click<8.2; the lock has 8.5 (why SkyPilot lives in .venv-launch)."""
    lock = (REPO / "requirements.lock").read_text()
    assert re.search(r"^click==8\.[5-9]", lock, re.M)
    assert "skypilot" not in lock
    assert sys.modules.get("sky") is None


def test_the_serving_env_a_spec_installs_is_the_one_the_serve_stage_finds(tmp_path, monkeypatch):
    from crosstune.launch.job_spec import make_job, serving_steps
    from crosstune.serve.engine import vllm_binary

    job = make_job(Path(H100), None, None, [])
    (stamp,) = [line.split()[-1] for line in serving_steps(job) if line.startswith("touch ")]
    venv = tmp_path / ".venv-serve"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(venv))
    assert vllm_binary() is None  # not stamped: an install that didn't finish
    (tmp_path / stamp).write_text("")
    assert stamp == ".venv-serve/.installed-vllm-gpu-0.32.0" and vllm_binary() == venv / "bin" / "vllm"


# --- preemption: each engine's own recovery ------------------------------------------------------------------------
SKY_RECOVERY = """
import json, sys
import sky
for path in sys.argv[1:]:
    (res,) = sky.Task.from_yaml(path).resources
    print(json.dumps({"use_spot": res.use_spot, "job_recovery": res.job_recovery}))
"""
JOBSET_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # jobset_types.go, FailurePolicyRule.Name
JOBSET_ACTIONS = {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"}


def test_a_skypilot_spot_study_is_a_managed_job_that_recovers_and_keeps_its_bundle_in_the_bucket(tmp_path, monkeypatch):
    spot, on_demand = tmp_path / "spot.yaml", tmp_path / "on-demand.yaml"
    launch(V5P, "--on", "skypilot", "--out", str(spot), "--bucket", "gs://my-bundles", "--spot")
    launch(H100, "--on", "skypilot", "--out", str(on_demand))
    data = yaml.safe_load(spot.read_text())
    assert data["resources"]["use_spot"] is True
    assert data["resources"]["job_recovery"] == {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 0}
    assert (
        '--out "$HOME/crosstune-bundles"/' in data["run"] and " --bucket /crosstune-bucket || status=$?" in data["run"]
    )
    assert "cp -a" not in data["run"]  # the study keeps the copy itself, after every stage and checkpoint
    assert "# Launch: sky jobs launch -n " in spot.read_text()
    assert "use_spot" not in yaml.safe_load(on_demand.read_text())["resources"]  # no bucket: the bundle is on the VM
    refused = fails(H100, "--on", "skypilot", "--spot", "--out", str(tmp_path / "x.yaml"))
    assert "--spot needs --bucket: a preempted VM's disk is gone" in refused
    loaded = in_launch_env(SKY_RECOVERY, str(spot), str(on_demand))
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    recovered, plain = [json.loads(line) for line in loaded.stdout.splitlines() if line.startswith("{")]
    assert recovered == {"use_spot": True, "job_recovery": data["resources"]["job_recovery"]}
    assert plain["use_spot"] is False and plain["job_recovery"] is None
    venv = tmp_path / "launch-venv"  # --submit: a managed job through the launch environment's sky
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "sky").write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/submitted\n')
    (venv / "bin" / "sky").chmod(0o755)
    monkeypatch.setenv("CROSSTUNE_LAUNCH_VENV", str(venv))
    launch(V5P, "--on", "skypilot", "--out", str(spot), "--bucket", "gs://my-bundles", "--spot", "--submit")
    assert (tmp_path / "submitted").read_text().split() == ["jobs", "launch", "-n", data["name"], str(spot)]


def test_a_gke_spot_slice_restarts_the_jobset_after_a_preemption_and_only_then(tmp_path):
    spec = tmp_path / "jobset.yaml"
    launch(V5P, "--on", "gke", "--image", "img:1", "--pvc", "bundles", "--spot", "--out", str(spec))
    doc = yaml.safe_load(spec.read_text())
    assert jobset_problems(doc) == []
    policy = doc["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 0  # a study failing on its own is not rerun
    (rule,) = policy["rules"]
    assert JOBSET_RULE_NAME.match(rule["name"]) and rule["action"] in JOBSET_ACTIONS
    assert (rule["action"], rule["onJobFailureReasons"]) == ("RestartJobSetAndIgnoreMaxRestarts", ["PodFailurePolicy"])
    for rj in doc["spec"]["replicatedJobs"]:  # a disrupted pod fails its Job for the reason the rule matches
        job = rj["template"]["spec"]
        assert job["podFailurePolicy"]["rules"] == [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        ]
        assert job["template"]["spec"]["restartPolicy"] == "Never"  # what a podFailurePolicy requires
    slice_pod = doc["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    assert slice_pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert slice_pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x1"
    assert slice_pod["tolerations"] == [
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    checked = in_launch_env(K8S_ROUND_TRIP, stdin=json.dumps(doc))
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert json.loads(checked.stdout.splitlines()[-1]) == []  # podFailurePolicy and tolerations are Kubernetes' own


def test_a_requeued_slurm_job_runs_the_same_study_again_which_resumes(tmp_path):
    script = tmp_path / "study.sbatch"
    launch(H100, "--on", "slurm", "--out", str(script))
    lines = script.read_text().splitlines()
    assert "#SBATCH --requeue" in lines and "#SBATCH --open-mode=append" in lines
    assert lines.index("#SBATCH --requeue") < lines.index("set -euo pipefail")  # a directive only before commands
    assert "--spot: Slurm's preemptible capacity is a partition's" in fails(
        H100, "--on", "slurm", "--spot", "--out", str(tmp_path / "s.sbatch")
    )
