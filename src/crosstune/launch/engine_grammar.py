"""What each engine accepts in the values a user gives `crosstune launch`, checked before a spec is written: a value
outside its engine's grammar is refused in one line naming the option, so nothing a user types reaches a job script
or a YAML spec except as a value the engine itself would take (and quoted there: shlex for shell, a YAML dumper for
YAML).

- Slurm `--time`: sbatch(1)'s formats ("minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
  "days-hours:minutes", "days-hours:minutes:seconds"), or UNLIMITED / INFINITE (Slurm's parse_time.c reads both,
  any case).
- Kubernetes object names: DNS-1123 subdomains (a claim's name, at most 253; the JobSet's own name is made from
  the recipe's name in [a-z0-9-], job_spec.Job.name).
- GCS bucket names: cloud.google.com/storage/docs/buckets#naming, as SkyPilot's GcsStore.validate_name applies them
  (SkyPilot's storage mount, GKE's FUSE volume); for Slurm, whatever `crosstune study --bucket` takes (the study keeps
  the copy itself: gs://, s3:// or a folder).
- Container images: the distribution reference grammar (github.com/distribution/reference, regexp.go).
"""

from __future__ import annotations

import re

from crosstune.launch.job_spec import LaunchError

_SLURM_TIME = re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}")
SLURM_TIME_FORMATS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 12:00:00, 2-00:00:00), or UNLIMITED"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_GCS_BUCKET = re.compile(r"[a-z0-9][-a-z0-9._]*[a-z0-9]")
# distribution/reference: domain (host[:port]) / path components, then :tag and/or @digest
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?")


def slurm_time(value: str) -> str:
    """`value` when sbatch's --time takes it; else LaunchError naming the formats."""
    if value.lower() in ("unlimited", "infinite") or _SLURM_TIME.fullmatch(value):
        return value
    raise LaunchError(f"--time {value!r}: not a Slurm time limit; give {SLURM_TIME_FORMATS} (sbatch(1), --time)")


def dns_subdomain(value: str, what: str) -> str:
    if len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value):
        return value
    raise LaunchError(
        f"{what} {value!r}: not a Kubernetes object name (DNS-1123 subdomain: lowercase letters, "
        "digits, '-' and '.', starting and ending with a letter or digit, at most 253)"
    )


def gcs_bucket(value: str, what: str = "--bucket") -> str:
    """The bucket's name (a leading gs:// dropped) when GCS allows it; else LaunchError naming the rule broken."""
    name = value.removeprefix("gs://")
    rule = None
    if not 3 <= len(name) <= 222:
        rule = "3 to 222 characters"
    elif not _GCS_BUCKET.fullmatch(name):
        rule = "lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    elif any(len(part) > 63 for part in name.split(".")) or any(s in name for s in ("..", ".-", "-.")):
        rule = "dot-separated parts of at most 63 characters, no '..', '.-' or '-.'"
    elif name.startswith("goog") or re.search(r"g[o0][o0]gle", name):
        rule = "no 'goog' prefix and no 'google'"
    elif re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", name):
        rule = "not an IP address"
    if rule:
        raise LaunchError(f"{what} {value!r}: not a GCS bucket name ({rule}; cloud.google.com/storage/docs/buckets)")
    return name


def study_bucket(value: str, what: str = "--bucket") -> str:
    """What `crosstune study --bucket` takes (gs://NAME, s3://NAME or a folder: crosstune.run.bucket), when the
    study keeps the bundle's copy itself (Slurm); else LaunchError."""
    from crosstune.run.bucket import BucketError, bucket_location

    try:
        return bucket_location(value)
    except BucketError as e:
        raise LaunchError(str(e).replace("--bucket", what, 1)) from None


def image_reference(value: str, what: str = "--image") -> str:
    if len(value) <= 512 and _IMAGE.fullmatch(value):
        return value
    raise LaunchError(
        f"{what} {value!r}: not a container image reference (REGISTRY/PATH[:TAG][@sha256:DIGEST], "
        "e.g. us-docker.pkg.dev/PROJECT/REPO/crosstune-tpu:0.1.0)"
    )
