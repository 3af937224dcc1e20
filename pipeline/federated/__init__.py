"""Federated training on Flower: the client's work on its own data, the server's merge, the
Flower apps and processes that carry them (docs/federated.md)."""
