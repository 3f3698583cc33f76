"""One case from its seed to its verdict, and the report of a failure: what was changed, the command line that
reproduces it (as a shell line in the kept folder, and as the pytest case), and what went wrong.

The seed: FUZZ_SEED (0 in CI); a case's inputs are a function of (seed, command, case number) alone, so a case
reruns the same whatever ran before it. FUZZ_CASES cases per command (8 in CI). A failing case's folder is kept
under FUZZ_KEEP (default /tmp/crosstune-fuzz/seed-SEED/COMMAND-CASE: tree, canaries and a copy of the world, with
REPRO.txt); a passing case's is removed.

Isolation, so that a verdict is the case's own, alone or beside others: every case runs in its own folder under
FUZZ_KEEP/cases, a folder no one may list (mode 0311: enter a name you know, list nothing) with a random name of its
own, and its command runs with file permissions binding it even as root (harness.drop_permission_override). A
command that walks "/" or "../.." (another case's hostile input, or any process of the machine) can't reach a case's
canaries; only the links the case itself put in its tree lead there. A failing case is kept where it ran, and
FUZZ_KEEP/COMMAND-CASE links to it.
"""

from __future__ import annotations

import os
import random
import secrets
import shlex
import shutil
from pathlib import Path

from tests.fuzz.case import CANARY_FILES, Ctx
from tests.fuzz.commands import COMMANDS
from tests.fuzz.harness import CROSSTUNE, Runner
from tests.fuzz.verdict import Canaries, canary_problems, ending_problems, leaks
from tests.helpers.fake_openai import FakeOpenAI

SEED = int(os.environ.get("FUZZ_SEED", "0"))
CASES = int(os.environ.get("FUZZ_CASES", "8"))
KEEP = Path(os.environ.get("FUZZ_KEEP", f"/tmp/crosstune-fuzz/seed-{SEED}"))
TEST = "tests/fuzz/test_fuzz.py::test_a_hostile_case_ends_as_crosstune_promises"


def shell_word(arg: str) -> str:
    """A word for bash: shlex's quoting, or $'...' when it holds control characters or undecodable bytes."""
    raw = os.fsencode(arg)
    if arg.isprintable() and raw == arg.encode("utf-8", "replace"):
        return shlex.quote(arg)
    return "$'" + "".join(chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}" for b in raw) + "'"


def _fresh(folder: Path) -> None:
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        for path in folder.rglob("*"):  # a folder made unreadable would stop rmtree
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def _unlisted_cases() -> Path:
    """FUZZ_KEEP/cases: enter-only (0311), so nothing lists the cases in it."""
    cases = KEEP / "cases"
    cases.mkdir(parents=True, exist_ok=True)
    cases.chmod(0o311)
    return cases


def run_case(command: str, number: int, world: Path, runner: Runner, endpoint: FakeOpenAI) -> list[str]:
    """Build, run and judge one case; the failure report (empty: it passed, and its folder is gone)."""
    rng = random.Random(f"{SEED}:{command}:{number}")
    case_dir = _unlisted_cases() / f"{command}-{number}-{secrets.token_hex(8)}"
    _fresh(case_dir)
    (case_dir / "tree").mkdir()
    (case_dir / "world").symlink_to(world)
    canaries = Canaries(case_dir / "canary", f"CANARY{rng.getrandbits(64):016x}")
    canaries.make(CANARY_FILES)
    ctx = Ctx(rng, case_dir, endpoint.url)
    case = COMMANDS[command](ctx)
    canaries.age()  # after the case is made: making links into them listed the folder
    protected = {p: p.read_bytes() for p in case.protected}
    before, digest_before = canaries.snapshot(), canaries.digest()
    endpoint.raw, endpoint.requests[:] = case.reply, []
    env = {k: v.replace("@CASE@", str(case_dir)) for k, v in case.env.items()}
    env["CROSSTUNE_CACHE"] = str(case_dir / "cache")
    outcome = runner.run(case.argv, ctx.tree, case_dir, case.timeout_s, env)
    after = canaries.snapshot()
    problems = ending_problems(outcome, case.codes, case.timeout_s)
    if case.garbage and outcome.code == 0:
        problems.append("exit 0 on the endpoint's garbage: no request could succeed, yet it counted as success")
    problems += canary_problems(canaries, before, after, (digest_before, canaries.digest()), ctx.listed)
    problems += leaks(canaries.token, outcome, ctx.tree, repr(endpoint.requests) + repr(endpoint.paths))
    problems += [
        f"a user's file {p} was changed"
        for p, data in protected.items()
        if not p.is_file() or p.is_symlink() or p.read_bytes() != data
    ]
    last = next((line for line in reversed(outcome.err.splitlines()) if line.strip()), "")
    with open(KEEP / "outcomes.txt", "a") as log:  # one line per case: what the cases end in
        cpu = "-" if outcome.cpu_s is None else f"{outcome.cpu_s:.2f}"
        log.write(f"{command}-{number}\texit {outcome.code}\t{outcome.wall_s:.2f} s\t{cpu} cpu s\t{last[:200]!r}\n")
    if not problems:
        shutil.rmtree(case_dir)
        return []
    named = KEEP / f"{command}-{number}"  # where a person finds it: a link into the unlisted folder
    if named.is_symlink() or named.is_file():
        named.unlink()
    elif named.is_dir():
        _fresh(named)
        named.rmdir()
    named.symlink_to(case_dir)
    (case_dir / "world").unlink()
    shutil.copytree(world, case_dir / "world", symlinks=True)  # the kept folder reproduces on its own
    line = f"cd {shell_word(str(ctx.tree))} && {CROSSTUNE} {' '.join(shell_word(a) for a in case.argv)}"
    tail = (outcome.out[-1500:] + "\n--- stderr\n" + outcome.err[-3000:]).strip()
    report = [
        f"fuzz case {command} #{number}, seed {SEED}: {'; '.join(problems)}",
        "inputs changed: " + ("; ".join(ctx.notes) or "none (the valid inputs)"),
        f"exit {outcome.code} after {outcome.wall_s:.1f} s",
        f"reproduce: {line}"
        + ("   (needs the fake endpoint: use the pytest line)" if case.reply or endpoint.requests else ""),
        f"or: FUZZ_SEED={SEED} FUZZ_CASES={number + 1} .venv/bin/python -m pytest -m fuzz '{TEST}[{command}-{number}]'",
        f"kept: {case_dir} (REPRO.txt, stdout.txt, stderr.txt)",
        "output (tail):",
        tail,
    ]
    (case_dir / "REPRO.txt").write_text("\n".join(report) + "\n", errors="replace")
    return report


def all_cases() -> list[tuple[str, int]]:
    return [(command, number) for command in COMMANDS for number in range(CASES)]
