"""scripts/install_iverilog.sh (via scripts/apt_install.sh) without iverilog: a PATH of stubs and a few coreutils."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.helpers.paths import REPO

SCRIPT = REPO / "scripts" / "install_iverilog.sh"
# What the script and the stubs run from the system; anything else (a real iverilog) stays out of sight.
SYSTEM_TOOLS = ("bash", "sh", "id", "head", "seq", "chmod", "cat")

# Real `iverilog -V` prints a version line then more; this one prints enough after it that an early-closing
# reader (`| head -1`) makes it die of SIGPIPE, as iverilog did on a fresh machine (exit 141 under pipefail).
IVERILOG_STUB = "#!/bin/sh\necho 'Icarus Verilog version 11.0 (stable) ()'\nseq 1 200000\n"
APT_GET_STUB = """#!/bin/sh
echo "$*" >> "{log}"
if [ "$3" = install ] && [ "{works}" = yes ]; then
  printf '%s' "$IVERILOG_STUB" > "{bin}/iverilog"; printf '#!/bin/sh\\n' > "{bin}/vvp"
  chmod +x "{bin}/iverilog" "{bin}/vvp"
  exit 0
fi
[ "$3" = update ] && exit 0
echo "E: Unable to locate package iverilog" >&2; exit 100
"""


def _sandbox(tmp_path: Path, apt_works: bool = True) -> tuple[dict[str, str], Path, Path]:
    stubs, system = tmp_path / "stubs", tmp_path / "system"
    stubs.mkdir()
    system.mkdir()
    for tool in SYSTEM_TOOLS:
        (system / tool).symlink_to(shutil.which(tool))
    log = tmp_path / "apt.log"
    for name, text in {
        "apt-get": APT_GET_STUB.format(log=log, bin=stubs, works="yes" if apt_works else "no"),
        "sudo": '#!/bin/sh\nexec "$@"\n',  # for a non-root test runner; root never calls it
    }.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {"PATH": f"{stubs}:{system}", "IVERILOG_STUB": IVERILOG_STUB, "HOME": str(tmp_path)}
    return env, stubs, log


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    bash = shutil.which("bash")
    return subprocess.run([bash, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_installs_missing_iverilog_and_reports_its_version(tmp_path):
    env, stubs, log = _sandbox(tmp_path)
    result = _run(env)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)  # was 141 (SIGPIPE)
    assert result.stdout.splitlines() == [
        "Installing iverilog from Debian...",
        "installed: Icarus Verilog version 11.0 (stable) ()",
    ]
    assert log.read_text().splitlines() == ["-o DPkg::Lock::Timeout=600 install -y -q iverilog"]
    assert (stubs / "iverilog").exists() and (stubs / "vvp").exists()


def test_quiet_when_iverilog_is_already_there(tmp_path):
    env, stubs, log = _sandbox(tmp_path)
    for name in ("iverilog", "vvp"):
        (stubs / name).write_text(IVERILOG_STUB)
        (stubs / name).chmod(0o755)
    result = _run(env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not log.exists()  # apt-get never ran


def test_failed_install_says_what_to_do(tmp_path):
    env, _, log = _sandbox(tmp_path, apt_works=False)
    result = _run(env)
    assert result.returncode == 1
    assert "Unable to locate package iverilog" in result.stderr  # apt's own reason is shown
    assert "install it by hand ('apt-get install iverilog')" in result.stderr
    assert log.read_text().splitlines() == [
        "-o DPkg::Lock::Timeout=600 install -y -q iverilog",
        "-o DPkg::Lock::Timeout=600 update -q",
        "-o DPkg::Lock::Timeout=600 install -y -q iverilog",
    ]


def test_no_early_closing_pipe_in_setup_scripts():
    """The class of the bug: `cmd | head` (or grep -q/-m, which also stop reading) under pipefail."""
    early_readers = re.compile(r"\|\s*(head|grep\s+(-\w*[qm]))\b")
    for path in [REPO / "Makefile", *sorted((REPO / "scripts").glob("*.sh"))]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            assert not early_readers.search(line), f"{path.name}:{n}: a pipe into an early-closing reader: {line}"


# Debian's chromium launcher runs /etc/chromium.d/dev-shm under dash, which prints a shell error of its own on
# stderr before the version (the first `make test` showed it as "installed: /usr/bin/chromium: 9: [: ...").
CHROMIUM_STUB = (
    "#!/bin/sh\necho '/usr/bin/chromium: 9: [: 25275990016: unexpected operator' >&2\necho 'Chromium 150.0'\n"
)
CHROMIUM_APT_STUB = """#!/bin/sh
[ "$3" = install ] || exit 0
printf '%s' "$CHROMIUM_STUB" > "{bin}/chromium"; chmod +x "{bin}/chromium"
"""


def test_installing_chromium_prints_its_version_and_none_of_the_launcher_s_noise(tmp_path):
    env, stubs, _ = _sandbox(tmp_path)
    (stubs / "apt-get").write_text(CHROMIUM_APT_STUB.format(bin=stubs))
    env["CHROMIUM_STUB"] = CHROMIUM_STUB
    result = subprocess.run(
        [shutil.which("bash"), str(REPO / "scripts" / "install_chromium.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.splitlines() == ["Installing chromium from Debian...", "installed: Chromium 150.0"]
    assert result.stderr == ""


SLURM_APT_STUB = """#!/bin/sh
echo "$*" >> "{log}"
[ -x "$POLICY_RC_D" ] && "$POLICY_RC_D"; echo "policy-rc.d says $?" >> "{log}"
for tool in slurmd slurmctld sbatch munged; do
  printf '#!/bin/sh\\necho slurm-wlm 22.05.8\\n' > "{bin}/$tool"; chmod +x "{bin}/$tool"
done
"""


def test_installing_slurm_keeps_its_daemons_from_starting_and_removes_the_policy_after(tmp_path):
    """Debian's postinst scripts start slurmctld, slurmd and munged unless policy-rc.d says no (exit 101): without
    one, the script puts one in place for the install and removes it after."""
    env, stubs, log = _sandbox(tmp_path)
    (tmp_path / "system" / "rm").symlink_to(shutil.which("rm"))
    (stubs / "apt-get").write_text(SLURM_APT_STUB.format(log=log, bin=stubs))
    env["POLICY_RC_D"] = str(tmp_path / "policy-rc.d")
    result = subprocess.run(
        [shutil.which("bash"), str(REPO / "scripts" / "install_slurm.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert log.read_text().splitlines() == [
        "-o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends slurmctld slurmd slurm-client munge",
        "policy-rc.d says 101",
    ]
    assert result.stdout.splitlines() == [
        "Installing slurmctld slurmd slurm-client munge from Debian...",
        "installed: slurm-wlm 22.05.8",
    ]
    assert not (tmp_path / "policy-rc.d").exists()
    result = subprocess.run(
        [shutil.which("bash"), str(REPO / "scripts" / "install_slurm.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")  # quiet once installed
