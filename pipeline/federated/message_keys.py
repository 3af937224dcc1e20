"""The names of Baton's own entries in Flower's messages, one definition for both ends.

The ServerApp's Recording strategy (pipeline.federated.recording) writes and reads them, the
ClientApp (pipeline.federated.flower_client) reads and writes them back; Flower-free, so the
client does not import the server's strategy to spell them.
"""

from __future__ import annotations

DOWNLINK = "baton-downlink"  # a reply's record: the digest of the client's copy, or "stale"
NONFINITE = "baton-nonfinite"  # a train reply's record: where its non-finite loss comes from
LATE_S = "baton-late-s"  # a train config entry: answer this many seconds late (a rehearsal)
