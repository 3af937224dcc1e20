"""Canonical status codes and their HTTP/gRPC mappings, as TF Serving uses them.

One error type crosses every layer (manager, batcher, REST, gRPC) so that the same
failure gets the same code on both APIs, which is what clients and load balancers key on.
"""

from __future__ import annotations

import enum

from baton.errors import BatonError


class Code(enum.IntEnum):
    """absl/gRPC canonical codes (values match `grpc.StatusCode` and error_codes.proto)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


# tensorflow_serving/model_servers/http_rest_api_handler: ToHTTPStatusCode.
HTTP_STATUS = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}


class ServingError(BatonError):
    """A failure with a canonical code; the message is shown to the client verbatim."""

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def __repr__(self) -> str:
        return f"ServingError({self.code.name}, {self.message!r})"


def invalid(message: str) -> ServingError:
    return ServingError(Code.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(Code.NOT_FOUND, message)


def unavailable(message: str) -> ServingError:
    return ServingError(Code.UNAVAILABLE, message)
