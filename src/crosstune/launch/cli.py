"""`crosstune launch RECIPE --on skypilot|gke|slurm --out SPEC [--submit]`: a job spec that runs `crosstune study`
on that engine, handed to the engine's own CLI with --submit (sky launch, kubectl apply, sbatch)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import typer
from rich.console import Console

from crosstune.launch import engine_grammar
from crosstune.launch.job_spec import Job, LaunchError, make_job
from crosstune.ownership import FileKind, check_out, file_refusal, write_owned_file

console = Console(soft_wrap=True, highlight=False)
ENGINES = ("skypilot", "gke", "slurm")
# A spec proves itself crosstune's by its last line (crosstune.ownership): a user's file, or a spec edited since, is
# never replaced.
SPEC = FileKind("crosstune launch")
SUBMIT = {
    "skypilot": ["sky", "launch", "-c", "{name}", "{spec}"],
    "gke": ["kubectl", "apply", "-f", "{spec}"],
    "slurm": ["sbatch", "{spec}"],
}
INSTALL = {
    "sky": "`make launch-env` (SkyPilot in .venv-launch; its pins conflict with the training stack's), or "
    '`pip install "skypilot[gcp]"` in an environment of its own; then `sky check`',
    "kubectl": "`gcloud components install kubectl` (or your distribution's kubectl), then "
    "`gcloud container clusters get-credentials CLUSTER`",
    "sbatch": "submit from a Slurm login node: sbatch comes with Slurm's client tools (Debian: apt-get install "
    "slurm-client)",
}


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)


def launch_venv() -> Path:
    """The launch environment (SkyPilot, `make launch-env`): $CROSSTUNE_LAUNCH_VENV, else .venv-launch in the
    project root (or the current directory)."""
    if os.environ.get("CROSSTUNE_LAUNCH_VENV"):
        return Path(os.environ["CROSSTUNE_LAUNCH_VENV"])
    here = Path(__file__).resolve().parents[3]  # src/crosstune/launch/cli.py -> project root
    return (here if (here / "Makefile").is_file() else Path.cwd()) / ".venv-launch"


def engine_cli(name: str) -> str | None:
    if name == "sky" and (launch_venv() / "bin" / "sky").is_file():
        return str(launch_venv() / "bin" / "sky")
    return shutil.which(name)


def _relative_recipe(recipe_file: Path) -> Path:
    """The recipe as the job sees it: relative to the checkout the job runs in (this directory)."""
    here = Path.cwd()
    try:  # abspath, not resolve: recipes/ is a link into the package, and the job sees the link too
        return Path(os.path.abspath(recipe_file)).relative_to(here)
    except ValueError:
        raise LaunchError(
            f"{recipe_file} is outside this directory ({here}): run `crosstune launch` from the crosstune checkout "
            "the job runs (SkyPilot syncs it; Slurm nodes and the image share it) with a recipe inside it"
        ) from None


def _check_plan(job: Job) -> None:
    from crosstune.planner import plan_recipe

    plan = plan_recipe(job.recipe, backend=job.backend)
    if plan.blockers:
        raise LaunchError(f"{job.target.name}: {plan.blockers[0]} (see `crosstune plan {job.recipe_file}`)")


def _refuse_foreign(out: Path) -> None:
    """Before the recipe is read: ownership's rule for a one-file output (write_owned_file checks it again)."""
    check_out(out, file=True, error=LaunchError)
    if why := file_refusal(out, SPEC):
        raise LaunchError(why)


def render_spec(engine: str, job: Job, **opts) -> str:
    if engine == "skypilot":
        from crosstune.launch import skypilot

        return skypilot.render(job, bucket=opts.get("bucket"), spot=bool(opts.get("spot")))
    if engine == "gke":
        from crosstune.launch import gke

        if not opts.get("image"):
            raise LaunchError("--on gke needs --image: an image with crosstune installed (docker/Dockerfile.tpu)")
        return gke.render(
            job, image=opts["image"], bucket=opts.get("bucket"), pvc=opts.get("pvc"), spot=bool(opts.get("spot"))
        )
    from crosstune.launch import slurm

    if opts.get("spot"):
        raise LaunchError(
            "--spot: Slurm's preemptible capacity is a partition's (PreemptMode=REQUEUE); the script "
            "always requeues and resumes: submit it to that partition (sbatch --partition P)"
        )
    return slurm.render(job, nodes=opts.get("nodes") or 1, time_limit=opts.get("time_limit"), bucket=opts.get("bucket"))


def check_options(
    on: str, bucket: str | None, pvc: str | None, image: str | None, nodes: int | None, time_limit: str | None
) -> None:
    """Refuse, before the recipe is loaded, a value that is outside its engine's grammar (engine_grammar)."""
    if on not in ENGINES:
        raise LaunchError(f"--on {on!r}: one of {', '.join(ENGINES)}")
    if nodes is not None and nodes < 1:
        raise LaunchError(f"--nodes {nodes}: give at least 1 (the nodes the job runs on)")
    if bucket is not None and on == "slurm":  # the study keeps the copy itself, wherever `study --bucket` can
        engine_grammar.study_bucket(bucket)
    elif bucket is not None:  # a SkyPilot storage mount, a GCS FUSE volume
        engine_grammar.gcs_bucket(bucket)
    if pvc is not None:
        engine_grammar.dns_subdomain(pvc, "--pvc")
    if image is not None:
        engine_grammar.image_reference(image)
    if time_limit is not None:
        engine_grammar.slurm_time(time_limit)


def submit(engine: str, job: Job, spec: Path, bucket: str | None = None) -> int:
    from crosstune.launch.skypilot import submit_argv  # a managed job with a bucket (recovered after preemption)

    template = submit_argv(bucket) if engine == "skypilot" else SUBMIT[engine]
    argv = [a.format(name=job.name, spec=spec) for a in template]
    exe = engine_cli(argv[0])
    if exe is None:
        raise LaunchError(f"--submit needs `{argv[0]}`, which is not installed here: {INSTALL[argv[0]]}")
    console.print(f"submitting: {' '.join([exe, *argv[1:]])}")
    return subprocess.run([exe, *argv[1:]], check=False).returncode


def launch(
    recipe_file: Path = typer.Argument(..., help="recipe YAML, inside the checkout the job runs"),
    on: str = typer.Option(..., "--on", help="skypilot (TPU VM, GPU box), gke (a TPU slice), slurm (GPU/CPU nodes)"),
    out: Path = typer.Option(..., "--out", help="the spec file to write (YAML; an sbatch script for slurm)"),
    target: str = typer.Option(None, "--target", help="hardware target, e.g. tpu-v5p-8, 2xh100 (default: recipe)"),
    backend: str = typer.Option(None, "--backend", help="torch or jax (default: jax on TPUs, torch on GPUs)"),
    overrides: list[str] = typer.Option(None, "--set", help="recipe override the study runs with (repeatable)"),
    bucket: str = typer.Option(
        None,
        "--bucket",
        help="skypilot, slurm: the bundle's copy (slurm: gs://, s3:// or a folder); gke: the bundle's volume",
    ),
    pvc: str = typer.Option(None, "--pvc", help="gke: a ReadWriteMany claim (Filestore) for the bundle"),
    image: str = typer.Option(None, "--image", help="gke: the container image with crosstune installed"),
    nodes: int = typer.Option(None, "--nodes", help="slurm: nodes (each the --target box; a CPU target: one)"),
    time_limit: str = typer.Option(None, "--time", help="slurm: the job's time limit, e.g. 12:00:00"),
    spot: bool = typer.Option(False, "--spot", help="spot/preemptible capacity (skypilot, gke; needs a bucket/volume)"),
    do_submit: bool = typer.Option(False, "--submit", help="hand the spec to the engine's CLI after writing it"),
) -> None:
    """Write a job spec that runs `crosstune study` on SkyPilot, GKE or Slurm; --submit hands it to that engine.

    Every spec carries the recipe's hash and crosstune's version. skypilot: a task YAML (resources from the target,
    setup = the lock + the accelerator's wheels, run = the study, bundle copied to --bucket). gke: a JobSet over the
    TPU slice's hosts (JAX multi-controller). slurm: an sbatch script (srun, torchrun rendezvous, FSDP2 across
    GPU nodes; or one CPU node with --target cpu), requeued and resumed. What each assumes: docs/REAL_HARDWARE.md."""
    check_options(on, bucket, pvc, image, nodes, time_limit)
    _refuse_foreign(out)
    job = make_job(_relative_recipe(recipe_file), target, backend, overrides)
    if on == "slurm":
        from crosstune.launch import slurm

        slurm.check(job, nodes or 1)  # what the nodes can't run, before the plan
        if job.backend == "torch":  # every step loads the same recipe: node and device counts included
            extra = [f"backend.torch.nodes={nodes or 1}", f"backend.torch.devices={job.target.devices}"]
            job = make_job(job.recipe_file, target, backend, [*(overrides or []), *extra])
    _check_plan(job)
    text = render_spec(on, job, bucket=bucket, pvc=pvc, image=image, nodes=nodes, time_limit=time_limit, spot=spot)
    write_owned_file(out, text, SPEC, error=LaunchError)
    if on == "slurm":
        out.chmod(0o755)
    console.print(f"wrote {out}: {on} job {job.name} (recipe hash {job.recipe_hash}, crosstune {job.version})")
    if do_submit:
        code = submit(on, job, out, bucket)
        if code:
            raise typer.Exit(code)
