"""Build the apply step's module while Beam moves from the analyzer pass to the apply pass.

The apply DoFn builds the transform module (the user's function traced with the analyzer
values, then its feeding function) from the merged analyzer accumulators it gets as a side
input: ~0.06 s on one thread at the start of the apply pass, while the other core waits.
Between the analyzer pass and the apply pass Beam itself is idle for ~0.1 s: the analyzer
bundle's state sampler thread is joined (it sleeps up to 200 ms between samples) and the small
bundles of the merge run. When the DoFns run in the driver's process and there is one train
shard, the merged value *is* that shard's partial (the merge of one partial changes nothing),
so the driver can build the module from it in that idle time: `EarlyBuild` is a thread that
waits for the analyzer DoFn to hand over its partial (`analyzed(box, partial)`), then calls
`build(partial)` and leaves the result in the box. The apply DoFn takes it (`take(box)`) and
builds for itself when there is none: several train shards (Beam's merge decides the value),
DoFns in other processes, or a build that failed here (the DoFn's own build then reports the
error as before).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

WAIT_S = 600.0  # the apply DoFn's wait for a build under way, before it builds for itself


def prepare(box: dict[str, Any], train_shards: int) -> dict[str, Any]:
    """`box` ready for the handover (the driver, before lending it to both DoFns)."""
    box.update(partials=[], built_early=None, early_done=threading.Event(),
               early_wanted=train_shards == 1, early_ready=threading.Condition())
    if train_shards != 1:
        box["early_done"].set()  # nothing will be built early: the DoFn does not wait
    return box


def analyzed(box: dict[str, Any] | None, partial: Any) -> None:
    """The analyzer DoFn's partial for its shard (in the driver's process only)."""
    if box is None or "partials" not in box or not box["early_wanted"]:
        return
    with box["early_ready"]:
        box["partials"].append(partial)
        box["early_ready"].notify_all()


def take(box: dict[str, Any] | None) -> Any | None:
    """The module built early (what `build` returned), or None: the DoFn builds it."""
    if box is None or "early_done" not in box:
        return None
    if not box["early_done"].wait(WAIT_S):
        return None
    return box["built_early"]


class EarlyBuild(threading.Thread):
    def __init__(self, box: dict[str, Any], build: Callable[[Any], Any]) -> None:
        super().__init__(name="baton-early-build", daemon=True)
        self.box, self.build = box, build
        self._stopped = False

    def run(self) -> None:
        ready = self.box["early_ready"]
        try:
            with ready:
                ready.wait_for(lambda: self._stopped or bool(self.box["partials"]))
                if not self.box["partials"]:
                    return
                partial = self.box["partials"][0]
            self.box["built_early"] = self.build(partial)
        except Exception:  # noqa: BLE001 - the DoFn builds for itself and reports it
            self.box["built_early"] = None
        finally:
            self.box["early_done"].set()

    def finish(self) -> None:
        """Stop waiting (the pipeline is over) and join."""
        with self.box["early_ready"]:
            self._stopped = True
            self.box["early_ready"].notify_all()
        self.join()
