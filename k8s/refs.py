"""Image references and Kueue queue names, as `baton k8s` accepts them.

An image must be pinned: a tag other than `latest`, or a digest. `latest` (said or implied by a
missing tag) names whatever was pushed last, so two nodes that pulled at different times run
different code in one job, and `IfNotPresent` keeps each node's stale copy. A tag is pulled
`Always` (it may be pushed again), a digest `IfNotPresent` (it cannot change).

A Kueue LocalQueue name is what Kueue's webhook accepts in the `kueue.x-k8s.io/queue-name`
label (jobframework.ValidateQueueName: a DNS-1123 subdomain) and a label value (at most 63).
"""

from __future__ import annotations

import re

from baton._version import __version__
from baton.k8s.errors import ManifestError

# A Kueue LocalQueue name: a DNS-1123 subdomain that is also a label value (Kueue's webhook,
# jobframework.ValidateQueueName, and the API server's label rules)
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_IMAGE = f"baton:{__version__}"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def check_image(field: str, value: object) -> str:
    """A pinned image reference: a tag other than `latest`, or a digest (`@sha256:...`).

    `latest` (said or implied by a missing tag) names whatever was pushed last: two nodes that
    pulled at different times run different code in one job, and `IfNotPresent` keeps each
    node's stale copy. A tag is the part after the last `:` of the last path component.
    """
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ManifestError(field, f"must be a container image reference. Received: {value!r}")
    if _DIGEST.search(value):
        return value
    if "@" in value:
        raise ManifestError(field, "a digest must be '@sha256:' and 64 lower-case hex digits. "
                            f"Received: {value!r}")
    last = value.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag or tag == "latest":
        raise ManifestError(field, "must be pinned: a tag other than 'latest' (e.g. "
                            f"'{value.rsplit(':', 1)[0] if tag else value}:0.1.0') or a digest "
                            "('@sha256:...'); 'latest' is whatever was pushed last, so nodes run "
                            f"different images. Received: {value!r}")
    return value


def pull_policy(image: str) -> str:
    """`IfNotPresent` for a digest (immutable), `Always` for a tag (a tag can be pushed again:
    each pod start checks the registry, and only changed layers are pulled)."""
    return "IfNotPresent" if _DIGEST.search(image) else "Always"


def check_queue(value: object) -> str:
    """A Kueue LocalQueue name (the `kueue.x-k8s.io/queue-name` label's value)."""
    if not isinstance(value, str) or not DNS1123_SUBDOMAIN.match(value) or len(value) > 63:
        raise ManifestError(
            "queue", "must be a Kueue LocalQueue name: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 63 characters (a DNS-1123 "
            f"subdomain that is also a label value). Received: {value!r}")
    return value
