"""`crosstune plan --compile`'s driver: find libtpu and compile the recipe's step in a process of its own.

libtpu (what jax 0.10.2's [tpu] extra pins) is an optional install kept out of the training environment
(`make tpu-compile-env` puts it in .venv-tpu-compile): with it importable, every `import jax` would look for a TPU.
The compile runs in a child process (crosstune.train.jax.aot) whose path includes that folder, so the caller's JAX
never sees libtpu and the compile's memory (~17 GB for Gemma 4 31B) goes when it ends. The child's progress lines
are passed on; libtpu's start-up warnings about a TPU it doesn't need are dropped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import deque
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.planner.aot_report import CompiledStep
from crosstune.untrusted_files import read_json

LIBTPU_REQUIREMENT = "libtpu==0.0.42.*"  # jax 0.10.2's [tpu] extra
LIBTPU_VERSION = re.compile(r"libtpu-0\.0\.42(\.\d+)*\.dist-info")
ENV_VAR = "CROSSTUNE_TPU_COMPILE_ENV"
# libtpu's start-up on a machine without a TPU: environment probing it needs only to run on one
NOISE = re.compile(
    r"^(WARNING: (could not determine|Logging before InitGoogle)|E0000 |=== Source Location Trace|"
    r"learning/|Failed to find host bounds)"
)


class LibtpuMissing(CrosstuneError):
    """libtpu is not installed where the compile looks for it; the message says how to install it."""


class CompileFailed(CrosstuneError):
    """The child process could not compile the step; the message holds its last lines."""


def tpu_compile_env(root: Path | None = None) -> Path:
    """The folder holding libtpu: $CROSSTUNE_TPU_COMPILE_ENV, else .venv-tpu-compile in the project root (or the
    current directory)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    if root is None:
        here = Path(__file__).resolve().parents[4]  # src/crosstune/train/jax/aot_process.py -> project root
        root = here if (here / "Makefile").is_file() else Path.cwd()
    return root / ".venv-tpu-compile"


def install_hint(folder: Path) -> str:
    return (
        f"--compile needs libtpu ({LIBTPU_REQUIREMENT}, a 213 MB wheel; no TPU needed), kept out of the training "
        f"environment: `make tpu-compile-env` installs it into {folder} (or: pip install --target {folder} "
        f"'{LIBTPU_REQUIREMENT}'; another folder: set {ENV_VAR})"
    )


def find_libtpu(root: Path | None = None) -> Path:
    """The folder to put on the child's path; LibtpuMissing (saying how to install it) when it isn't there."""
    folder = tpu_compile_env(root)
    if not (folder / "libtpu" / "libtpu.so").is_file():
        raise LibtpuMissing(f"{folder}: no libtpu. " + install_hint(folder))
    if not any(LIBTPU_VERSION.fullmatch(p.name) for p in folder.glob("libtpu-*.dist-info")):
        found = ", ".join(sorted(p.name for p in folder.glob("libtpu-*.dist-info"))) or "no version"
        raise LibtpuMissing(f"{folder}: {found}, not {LIBTPU_REQUIREMENT} (jax's). " + install_hint(folder))
    return folder


def child_env(libtpu: Path, accelerator: str) -> dict[str, str]:
    """The caller's environment with libtpu and this crosstune first on the path; JAX on CPU (the compile targets
    the topology, no device is opened)."""
    here = Path(__file__).resolve().parents[3]  # the folder holding the crosstune package
    path = [str(libtpu), str(here), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "JAX_PLATFORMS": "cpu",
        "TPU_ACCELERATOR_TYPE": accelerator,  # quiets libtpu's probe for the machine's own TPU
        # no TPU is opened, so two compiles at once are safe; without this the second fails on /tmp/libtpu_lockfile
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    }


def compile_step(
    recipe_file: Path, overrides: list[str], layers: int | None, accelerator: str, echo=None
) -> CompiledStep:
    """Compile the recipe's train step for its TPU topology in a child process; its progress lines go to `echo`
    (default: stderr)."""
    libtpu = find_libtpu()
    with tempfile.TemporaryDirectory(prefix="crosstune-compile-") as tmp:
        out = Path(tmp) / "compiled.json"
        cmd = [sys.executable, "-m", "crosstune.train.jax.aot", str(recipe_file), "--out", str(out)]
        cmd += [a for o in overrides for a in ("--set", o)] + ([] if layers is None else ["--layers", str(layers)])
        tail: deque[str] = deque(maxlen=12)
        with subprocess.Popen(
            cmd, env=child_env(libtpu, accelerator), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        ) as proc:
            for line in proc.stderr:
                if NOISE.match(line):
                    continue
                tail.append(line.rstrip())
                if echo is None:
                    print(line, end="", file=sys.stderr, flush=True)
                else:
                    echo(line.rstrip())
        if proc.returncode != 0 or not out.is_file():
            last = next((t for t in reversed(tail) if t.strip()), "")
            detail = last.removeprefix("error: ") if last.startswith("error: ") else "\n  ".join(tail)
            raise CompileFailed(
                f"compiling {recipe_file} for its TPU topology failed (exit {proc.returncode}): {detail}"
            )
        return CompiledStep.from_dict(read_json(out))
