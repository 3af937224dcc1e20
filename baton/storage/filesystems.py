"""The file system behind a location: pyarrow.fs for local disk, S3 and GCS, and its errors.

Why pyarrow.fs (not fsspec with s3fs/gcsfs): it is already a dependency (Arrow is how the data
plane reads and writes), its S3 and GCS clients are C++ (the AWS SDK and google-cloud-cpp) that
move bytes without the GIL on their own thread pool, and it is one maintained layer for both
clouds, so no path or retry logic is written twice. fsspec would add two more libraries
(aiobotocore, gcsfs) with their own credential and retry code.

Credentials come from each cloud's standard chain, untouched: for S3 the AWS SDK's (the
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN variables, AWS_PROFILE and the
shared config files, a web identity token (IRSA: AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE),
the ECS and EC2 instance metadata); for GCS google-cloud-cpp's Application Default Credentials
(GOOGLE_APPLICATION_CREDENTIALS, gcloud's user credentials, the metadata server, which is how
GKE Workload Identity answers). An S3-compatible endpoint is set the way the AWS SDKs and CLI
set it: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; a GCS emulator by STORAGE_EMULATOR_HOST (the
Google client libraries' variable) or CLOUD_STORAGE_EMULATOR_ENDPOINT (google-cloud-cpp's),
reached anonymously as emulators expect.

Errors: every failure of the store becomes a StorageError whose one line names the URL, what was
being done and the cause in words (access denied, no such bucket, endpoint unreachable);
FileNotFoundError for a missing object passes through for callers that expect it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

from baton.errors import StorageError
from baton.storage import location as L

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, ...], Any] = {}
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0
RETRY_S = 30.0  # GCS: how long google-cloud-cpp retries a transient failure

__all__ = ["StorageError", "bucket_exists", "check_bucket", "describe", "endpoint", "errors",
           "resolve"]


def resolve(loc: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path within it) for a location: a URL or a local path."""
    import pyarrow.fs as pafs

    if not L.is_remote(loc):
        return _cached(("local",), pafs.LocalFileSystem), os.path.abspath(loc)
    url = L.parse(loc)
    if url.scheme == "s3":
        return _s3(url.bucket), url.path
    return _gcs(), url.path


def endpoint(scheme: str) -> str | None:
    """The endpoint override in force for `scheme` (None: the cloud's own)."""
    if scheme == "s3":
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return (os.environ.get("STORAGE_EMULATOR_HOST")
            or os.environ.get("CLOUD_STORAGE_EMULATOR_ENDPOINT") or None)


def _s3(bucket: str) -> Any:
    import pyarrow.fs as pafs

    override = endpoint("s3")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    key = ("s3", override or "", region or "", "" if override or region else bucket,
           *_credential_env("AWS_"))

    def make() -> Any:
        where = region
        if where is None and override is None:
            try:  # AWS proper: the bucket's own region (one HEAD request, no credentials needed)
                where = pafs.resolve_s3_region(bucket)
            except (OSError, ValueError):
                where = None  # the SDK's default; a missing bucket is reported on first use
        return pafs.S3FileSystem(
            endpoint_override=override, region=where or "us-east-1",
            connect_timeout=CONNECT_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3))

    return _cached(key, make)


def _gcs() -> Any:
    import pyarrow.fs as pafs

    override = endpoint("gs")
    key = ("gs", override or "", *_credential_env("GOOGLE_"))

    def make() -> Any:
        retry = datetime.timedelta(seconds=RETRY_S)
        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or None
        if override is None:
            return pafs.GcsFileSystem(retry_time_limit=retry, project_id=project)
        scheme, _, host = override.rpartition("://")
        return pafs.GcsFileSystem(anonymous=True, scheme=scheme or "http", endpoint_override=host,
                                  retry_time_limit=retry, project_id=project or "baton")

    return _cached(key, make)


def _credential_env(prefix: str) -> tuple[str, ...]:
    """The credential variables' values, so a changed credential gets a new client."""
    return tuple(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(prefix))


def _cached(key: tuple[str, ...], make: Any) -> Any:
    with _LOCK:
        fs = _CACHE.get(key)
        if fs is None:
            fs = _CACHE[key] = make()
        return fs


@contextlib.contextmanager
def errors(loc: str, doing: str) -> Iterator[None]:
    """Turn the store's failures inside the block into one-line StorageErrors naming `loc`.

    FileNotFoundError passes through (a missing object is an answer, not a failure), except
    when the bucket itself is missing, which is named as such.
    """
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        if L.is_remote(loc) and not bucket_exists(loc):
            raise StorageError(f"{doing} {loc}: bucket {L.parse(loc).bucket!r} does not "
                               "exist") from None
        raise exc from None
    except (OSError, ValueError, RuntimeError) as exc:
        if not L.is_remote(loc):
            raise StorageError(f"{doing} {loc}: {_first_line(exc)}") from None
        raise StorageError(f"{doing} {loc}: {describe(loc, exc)}") from None


def describe(loc: str, exc: BaseException) -> str:
    """The cause of a store failure in words, with the remedy when there is a usual one."""
    text = str(exc)
    url = L.parse(loc)
    if re.search(r"access_?denied|invalid_?access_?key|signature_?does_?not_?match|"
                 r"permission_?denied|unauthenticated|expired_?token|\b40[13]\b|forbidden",
                 text.replace(" ", "_"), re.IGNORECASE):
        chain = ("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the pod's service "
                 "account role" if url.scheme == "s3" else
                 "GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or "
                 "the pod's Workload Identity service account")
        return f"access denied (check the credentials: {chain})"
    if re.search(r"NETWORK_CONNECTION|Could not connect|Couldn't connect|curlCode: ?[67]\b|"
                 r"Connection refused|UNAVAILABLE|Could not resolve", text):
        where = endpoint(url.scheme) or ("the S3 endpoint" if url.scheme == "s3"
                                         else "the GCS endpoint")
        return f"cannot reach {where}: {_cause(text)}"
    m = re.search(r"AWS Error (INTERNAL_FAILURE|SERVICE_UNAVAILABLE|SLOW_DOWN|THROTTLING)"
                  r"[^:]*: ([^(\n]*)", text)
    if m:
        return f"the store failed ({m.group(1)}: {m.group(2).strip()}); a rerun retries"
    if re.search(r"NoSuchBucket|NO_SUCH_BUCKET|[Bb]ucket .*(not found|does not exist)", text) \
            or not bucket_exists(loc):
        return f"bucket {url.bucket!r} does not exist"
    return _first_line(exc)


def bucket_exists(loc: str) -> bool:
    """Whether the bucket of URL `loc` exists (True when that cannot be told: the caller's
    own error is then the better message)."""
    import pyarrow.fs as pafs

    fs, _ = resolve(loc)
    try:
        return bool(fs.get_file_info(L.parse(loc).bucket).type != pafs.FileType.NotFound)
    except (OSError, ValueError):
        return True


def check_bucket(loc: str, what: str) -> None:
    """A StorageError now, naming `what` and the URL, if the bucket is missing or refuses us;
    nothing for local paths. Commands call it before any work, so a typo in a bucket name
    is one line, not a failure after the first stage."""
    if not L.is_remote(loc):
        return
    import pyarrow.fs as pafs

    fs, _ = resolve(loc)
    bucket = L.parse(loc).bucket
    with errors(loc, f"{what}: cannot use"):
        info = fs.get_file_info(bucket)
    if info.type == pafs.FileType.NotFound:
        raise StorageError(f"{what}: cannot use {loc}: bucket {bucket!r} does not exist")


def _cause(text: str) -> str:
    m = re.search(r"(Could not connect[^;\n]*|Failed to connect[^;\n]*|Could not resolve[^;\n]*"
                  r"|Connection refused[^;\n]*)", text)
    return (m.group(1) if m else text.splitlines()[0])[:160]


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r"\s*Detail: \[errno \d+\].*$", "", text)
    return text[:240]
