"""Baton's TensorFlow Serving-compatible model server.

`baton serve` speaks TF Serving's REST and gRPC APIs with its flags, so any TF Serving
client, dashboard or load balancer works unchanged, and the same model directory works
with the official tensorflow/serving image. Importing this package is cheap: TensorFlow
and gRPC are imported only by the modules that run models or sockets.
"""

from baton.serving.status import Code, ServingError

__all__ = ["Code", "ServingError"]
