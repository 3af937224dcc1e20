"""Who takes part in a federated run, under which name, and how much each update weighs.

The SuperLink admits only registered nodes (`--enable-supernode-auth`); the ServerApp does not
rely on that alone. The plan carries the registry the launcher made (client name -> node id,
pipeline.federated.control.Control.register), and:

- a node outside it is never sent a message and nothing it sends is read (`allowed`): on a
  SuperLink that admits any node (an `insecure: true` rehearsal) or kept an old registration,
  an unknown node under a taken client name gets nothing and contributes nothing;
- a node's name is the registry's, never the one its reply claims (`name`); a reply claiming
  another client's name is refused (`claims`);
- each node declares its train and eval examples once, at setup (`declare`), and an update or
  evaluation weighs at most that (`bound`): a node cannot re-weight itself mid-run. Every
  refusal and every bound applied is kept in `events`, for the round's record.

With no registry (a plan written before there was one), every node is allowed under the name it
reports, as before; the bounds still apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class Admission:
    def __init__(self, registry: Mapping[str, int] | None = None) -> None:
        self.registry = {int(v): str(k) for k, v in (registry or {}).items()}
        self.declared: dict[int, dict[str, int]] = {}
        self.events: list[dict[str, Any]] = []
        self._ignored: set[int] = set()

    def allowed(self, nodes: Iterable[int]) -> list[int]:
        """The registered ones among `nodes` (all of them without a registry)."""
        nodes = [int(n) for n in nodes]
        if not self.registry:
            return nodes
        out = [n for n in nodes if n in self.registry]
        for n in sorted(set(nodes) - set(out) - self._ignored):
            self._ignored.add(n)
            self.events.append({"refused": "unregistered node", "node": n})
        return out

    def name(self, node: int, claimed: str | None = None) -> str:
        if self.registry:
            return self.registry.get(int(node), f"unregistered-{node}")
        return str(claimed if claimed is not None else node)

    def claims(self, node: int, claimed: str) -> bool:
        """Whether a reply from `node` claiming to be `claimed` is accepted."""
        if not self.registry:
            return True
        ok = self.registry.get(int(node)) == claimed
        if not ok:
            self.events.append({"refused": "name mismatch", "node": int(node),
                                "registered": self.registry.get(int(node)),
                                "claimed": claimed})
        return ok

    def declare(self, node: int, train: int, eval_rows: int) -> None:
        """What `node` said it holds at setup; a second declaration never raises the first."""
        old = self.declared.get(int(node))
        if old is not None:
            train, eval_rows = min(train, old["train"]), min(eval_rows, old["eval"])
        self.declared[int(node)] = {"train": max(0, int(train)), "eval": max(0, int(eval_rows))}

    def limit(self, node: int, kind: str) -> int | None:
        """The most a `kind` ("train" or "evaluate") reply of `node` may weigh; None when it
        declared nothing (a resumed run's setup answers again, so only before setup)."""
        d = self.declared.get(int(node))
        if d is None:
            return None
        if kind == "train":
            return d["train"]
        return d["eval"] or d["train"]  # a client without eval rows evaluates on train

    def bound(self, node: int, kind: str, reported: float) -> float:
        """`reported` examples, at most the declared ones (0 from a node that declared none)."""
        limit = self.limit(node, kind)
        if limit is None:
            if self.registry or self.declared:
                self.events.append({"refused": f"{kind} weight from a node that declared "
                                    "nothing", "node": int(node), "reported": reported})
                return 0.0
            return reported
        if reported > limit:
            self.events.append({"bounded": kind, "client": self.name(node), "node": int(node),
                                "reported": reported, "declared": limit})
            return float(limit)
        return reported

    def take_events(self) -> list[dict[str, Any]]:
        out, self.events = self.events, []
        return out
