"""The release's version, in a module of its own: `baton/__init__.py` re-exports it, and the
layers below the public API (k8s's default image tag, the spec's `cluster.image`) read it here
without importing the package root, which names every layer."""

__version__ = "0.1.0"
