"""A JobSet (jobset.x-k8s.io/v1alpha2) that runs `crosstune study` on a GKE TPU slice, one pod per host.

Why JobSet, not xpk: GKE's TPU docs run multi-host slices as JobSets (xpk itself generates one, and the docs put
xpk forward for quick proof-of-concept clusters it creates); a JobSet is one reviewable file that `kubectl apply`
hands to a cluster the user already runs, with the slice kept on one node pool (exclusive topology) and a
headless service so the hosts find each other.

Two replicated jobs: `prepare` (one CPU pod: the data prepared once, the plan), then `slice` (dependsOn prepare
Complete; one pod per TPU host, CROSSTUNE_MULTIHOST=1 so JAX's multi-controller initialisation finds its peers from
GKE's TPU environment): every host runs `study --only train`, then host 0 runs the stages after training. The bundle
lives on a volume every pod mounts: a Filestore/NFS claim (--pvc) or a GCS bucket with hierarchical namespace through
the GCS FUSE CSI driver (--bucket; hierarchical namespace: the study and Orbax rename folders into place).

Preemption: every checkpoint is on that volume as it is written, so a restarted JobSet resumes from the last one. A
pod that a preemption or node shutdown disrupts (Kubernetes' DisruptionTarget condition) fails its Job through the
Job's podFailurePolicy, and the JobSet's failurePolicy restarts the whole set for that reason without counting it
(RestartJobSetAndIgnoreMaxRestarts); any other failure ends the JobSet (maxRestarts 0: the study's message says what
to fix). `--spot` puts the slice on a Spot TPU node pool (cloud.google.com/gke-spot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crosstune.emit import Raw, shell_word
from crosstune.launch.job_spec import Job, LaunchError, to_yaml

API_VERSION = "jobset.x-k8s.io/v1alpha2"
BUNDLES = "/bundles"
SPOT = "cloud.google.com/gke-spot"  # the label (and taint) of GKE's Spot node pools
# A disrupted pod fails its Job with reason PodFailurePolicy (Kubernetes' Job podFailurePolicy) ...
DISRUPTED = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
# ... and the JobSet restarts for that reason without counting it; any other failure ends it.
FAILURE_POLICY = {
    "maxRestarts": 0,
    "rules": [
        {
            "name": "preemption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
        }
    ],
}


@dataclass(frozen=True)
class Slice:
    accelerator: str  # cloud.google.com/gke-tpu-accelerator
    topology: str  # cloud.google.com/gke-tpu-topology
    hosts: int
    chips_per_host: int


SLICES: dict[str, Slice] = {
    "tpu-v5p-8": Slice("tpu-v5p-slice", "2x2x1", 1, 4),
    "tpu-v5p-16": Slice("tpu-v5p-slice", "2x2x2", 2, 4),
    "tpu-v6e-4": Slice("tpu-v6e-slice", "2x2", 1, 4),
    "tpu-v6e-8": Slice("tpu-v6e-slice", "2x4", 1, 8),
    "tpu-v5e-8": Slice("tpu-v5-lite-podslice", "2x4", 1, 8),
}


def tpu_slice(job: Job) -> Slice:
    if job.target.name not in SLICES:
        raise LaunchError(f"--on gke runs TPU slices: give --target one of {', '.join(SLICES)} (not {job.target.name})")
    if job.backend != "jax":
        raise LaunchError("a TPU slice trains with the jax backend: give --backend jax")
    return SLICES[job.target.name]


def _volume(bucket: str | None, pvc: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The bundle volume and the pod annotations it needs."""
    if bool(bucket) == bool(pvc):
        raise LaunchError(
            "give the volume every host writes the bundle to: --pvc CLAIM (Filestore/NFS) or --bucket NAME "
            "(a GCS bucket with hierarchical namespace, mounted with the GCS FUSE CSI driver)"
        )
    if pvc:
        return {"name": "bundles", "persistentVolumeClaim": {"claimName": pvc}}, {}
    attrs = {"bucketName": bucket.removeprefix("gs://"), "mountOptions": "implicit-dirs"}  # type: ignore[union-attr]
    return {"name": "bundles", "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": attrs}}, {
        "gke-gcsfuse/volumes": "true"
    }


def _container(job: Job, image: str, script: str, env: dict[str, str], tpu_chips: int | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "crosstune",
        "image": image,
        "command": ["bash", "-c", script],
        "env": [{"name": k, "value": v} for k, v in {**job.labels(), "HF_HUB_OFFLINE": "1", **env}.items()],
        "volumeMounts": [{"name": "bundles", "mountPath": BUNDLES}],
    }
    if tpu_chips:
        container["resources"] = {"requests": {"google.com/tpu": tpu_chips}, "limits": {"google.com/tpu": tpu_chips}}
    return container


def _job(parallelism: int, pod: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "backoffLimit": 0,
        "podFailurePolicy": DISRUPTED,
    }
    if parallelism > 1:
        spec["completionMode"] = "Indexed"
    meta = {"annotations": annotations} if annotations else {}
    return {"spec": {**spec, "template": {"metadata": meta, "spec": {"restartPolicy": "Never", **pod}}}}


def spot_placement(spot: bool) -> dict[str, Any]:
    """The slice pods' placement on a Spot TPU node pool (GKE's label, and its taint when the pool has one)."""
    if not spot:
        return {}
    return {
        "nodeSelector": {SPOT: "true"},
        "tolerations": [{"key": SPOT, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    }


def jobset(
    job: Job, *, image: str, bucket: str | None = None, pvc: str | None = None, spot: bool = False
) -> dict[str, Any]:
    sl = tpu_slice(job)
    volume, pod_annotations = _volume(bucket, pvc)
    out = Raw(shell_word(f"{BUNDLES}/{job.bundle}"))  # a shell word in the container's script
    exe = "crosstune"  # on the image's PATH (docker/Dockerfile.tpu)
    prepare = "\n".join(["set -euo pipefail", job.study(out, "--only", "prepare,plan", exe=exe)])
    host0 = '[ "${TPU_WORKER_ID:-${JOB_COMPLETION_INDEX:-0}}" = 0 ]'
    train = "\n".join(
        [
            "set -euo pipefail",
            job.study(out, "--only", "train", exe=exe),
            f"if {host0}; then {job.study(out, '--from', 'export', exe=exe)}; fi",
        ]
    )
    selector = {
        "cloud.google.com/gke-tpu-accelerator": sl.accelerator,
        "cloud.google.com/gke-tpu-topology": sl.topology,
    }
    multihost = {"CROSSTUNE_MULTIHOST": "1"} if sl.hosts > 1 else {}
    prepare_pod = {"containers": [_container(job, image, prepare, {}, None)], "volumes": [volume]}
    placement = spot_placement(spot)
    slice_pod = {
        "nodeSelector": {**selector, **placement.pop("nodeSelector", {})},
        **placement,
        "containers": [_container(job, image, train, multihost, sl.chips_per_host)],
        "volumes": [volume],
    }
    annotations = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool",
        "crosstune/recipe-hash": job.recipe_hash,
        "crosstune/version": job.version,
    }
    slice_job = {
        "name": "slice",
        "replicas": 1,
        "dependsOn": [{"name": "prepare", "status": "Complete"}],
        "template": _job(sl.hosts, slice_pod, pod_annotations),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": job.name, "annotations": annotations},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "failurePolicy": FAILURE_POLICY,
            "replicatedJobs": [
                {"name": "prepare", "replicas": 1, "template": _job(1, prepare_pod, pod_annotations)},
                slice_job,
            ],
        },
    }


def render(job: Job, **kwargs: Any) -> str:
    sl = tpu_slice(job)
    head = [
        f"crosstune {job.version}: `crosstune study` of {job.recipe.name} (recipe hash {job.recipe_hash}) on a GKE "
        f"{job.target.name} slice ({sl.hosts} host(s) × {sl.chips_per_host} chips, topology {sl.topology}).",
        "Needs the JobSet controller on the cluster and a TPU node pool of that topology. Submit: kubectl apply -f "
        "THIS_FILE",
    ]
    return to_yaml(jobset(job, **kwargs), head)
