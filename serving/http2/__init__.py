"""The native gRPC server: HTTP/2 (RFC 9113) and gRPC's unary calls on asyncio.

Why not grpcio's server: under load its per-call cost is the server's limit (every call
crosses from grpc's polling thread to the event loop and back), and python-hyper's `h2`
under the same gRPC layer answered a third of this server's calls per second
(docs/benchmarks-serving.md). Every method of TF Serving's API is unary, so this package
implements exactly that, on the serving loop, hardened against hostile clients as the
maintained servers are (limits.py lists every cap, timeout and budget).

Modules, one concept each: `frames` (wire format), `hpack` (header decoding within the
advertised list size), `headers` (RFC 9113 request checks), `limits`, `stream`,
`connection` (frames in: state machine, flow control, budgets), `send` (frames out within
the peer's windows), `calls` (gRPC semantics), `server` (GrpcServer).
"""

from baton.serving.http2.limits import Http2Limits
from baton.serving.http2.server import GrpcServer, channel_options

__all__ = ["GrpcServer", "Http2Limits", "channel_options"]
