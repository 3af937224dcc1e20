"""A location is a local path or an object-store URL (`s3://bucket/key`, `gs://bucket/key`).

Every flag and config field that names a place (`--runs-dir`, a push's `serving_base`,
`--model_base_path`, `baton inspect`, `baton rollback`) holds a location as a string, and this
module is the one place that tells the two kinds apart, checks a URL and joins parts onto it.
`pathlib.Path` must never hold a URL: `Path("s3://b/k")` is `s3:/b/k`; `from_path` undoes that
for a value that went through a Path by mistake (a config field typed `Path`).

No third-party import here: `baton --help` and the CLI's argument checks stay instant.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from pathlib import Path

from baton.errors import UsageError

SCHEMES = ("s3", "gs")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://(.*)$")
_MANGLED = re.compile(r"^(s3|gs):/(?!/)(.*)$")  # a URL that went through pathlib.Path
# S3 and GCS bucket names: 3-63 lower-case letters, digits, dots, hyphens (GCS also `_`)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")


@dataclasses.dataclass(frozen=True)
class Url:
    """A parsed object-store URL: `scheme://bucket/key` (key without leading or trailing /)."""

    scheme: str
    bucket: str
    key: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.key}" if self.key else "")

    @property
    def path(self) -> str:
        """`bucket/key`: the path pyarrow's S3 and GCS file systems take."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is an object-store URL (s3:// or gs://), not a local path."""
    return isinstance(location, str) and location.startswith(("s3://", "gs://"))


def parse(url: str, what: str = "location") -> Url:
    """`url` parsed; UsageError (exit 2) naming `what` for an unsupported scheme or a URL
    without a bucket."""
    m = _URL.match(url)
    if m is None or m.group(1) not in SCHEMES:
        scheme = m.group(1) if m else ""
        raise UsageError(f"{what}: {scheme}:// is not supported (local paths, s3:// and gs:// "
                         f"are). Received: {url!r}")
    bucket, _, key = m.group(2).partition("/")
    if not _BUCKET.match(bucket):
        raise UsageError(f"{what}: {url!r} has no valid bucket name (expected "
                         f"{m.group(1)}://BUCKET/PREFIX). Received bucket: {bucket!r}")
    key = "/".join(p for p in key.split("/") if p)
    if any(p in (".", "..") for p in key.split("/")):
        raise UsageError(f"{what}: {url!r} has '.' or '..' in its path")
    return Url(m.group(1), bucket, key)


def normalize(location: str | os.PathLike[str], what: str = "location") -> str:
    """A URL in canonical form (no empty or trailing segments), or a local path made absolute
    (`~` expanded). Other `scheme://` values are refused by name."""
    text = os.fspath(location)
    m = _MANGLED.match(text)
    if m is not None and not text.startswith(("s3://", "gs://")):
        text = f"{m.group(1)}://{m.group(2)}"
    if _URL.match(text):
        if text.startswith("file://"):
            return os.path.abspath(text[len("file://"):])
        return str(parse(text, what))
    return os.path.abspath(os.path.expanduser(text))


def from_path(value: str | os.PathLike[str]) -> str:
    """`value` as a location string: a URL that a `Path` collapsed (`s3:/b/k`) is restored."""
    text = os.fspath(value)
    m = _MANGLED.match(text)
    return f"{m.group(1)}://{m.group(2)}" if m else text


def join(location: str | os.PathLike[str], *parts: str) -> str:
    """`location` with `parts` appended (`/` for URLs, the OS separator for paths)."""
    text = os.fspath(location)
    if not is_remote(text):
        return os.path.join(text, *parts)
    tail = "/".join(q for p in parts for q in p.split("/") if q)
    return f"{text.rstrip('/')}/{tail}" if tail else text


def parent(location: str) -> str:
    if not is_remote(location):
        return os.path.dirname(location.rstrip(os.sep)) or os.sep
    u = parse(location)
    return str(Url(u.scheme, u.bucket, posixpath.dirname(u.key)))


def basename(location: str) -> str:
    return posixpath.basename(location.rstrip("/")) if is_remote(location) \
        else os.path.basename(location.rstrip(os.sep))


def relative(location: str, base: str) -> str:
    """`location`'s path below `base` (both URLs or both paths); ValueError when it is not
    below it."""
    if is_remote(location) != is_remote(base):
        raise ValueError(f"{location!r} is not below {base!r}")
    if not is_remote(location):
        rel = os.path.relpath(location, base)
        if rel.startswith(".."):
            raise ValueError(f"{location!r} is not below {base!r}")
        return Path(rel).as_posix()
    prefix = base.rstrip("/") + "/"
    if not location.startswith(prefix):
        raise ValueError(f"{location!r} is not below {base!r}")
    return location[len(prefix):]
