"""Write the transform SavedModel while Beam winds the apply pipeline down, not after it.

When the apply step's DoFn runs in the driver's process (the in-process FnApiRunner), it
hands the driver the module it built (`local_objects`, the stage's `box`). Once every shard
has been applied, what is left of the pipeline is Beam's own ending: the bundle's state
sampler thread is joined (it sleeps up to 200 ms between samples, so a bundle of ~0.6 s
waits ~60 ms for it), then the small bundles that sum the counts. Those ~0.08 s are idle
time; the SavedModel export (~0.06 s on the data benchmark's text function) fits in them.

`EarlyExport` is a thread the driver starts before the pipeline: it waits until the box says
all `shards` were applied, then saves `box["built"]`. `finish()` (after the pipeline) stops
the wait, joins, and re-raises the export's error; `saved` says whether it ran (it does not
when the DoFns ran in other processes, or the pipeline failed): the driver then saves as
before. The box's `applied` count and condition are set up by `prepare(box)`; the DoFn calls
`applied(box)` after each shard.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any


def prepare(box: dict[str, Any]) -> dict[str, Any]:
    """`box` ready to count applied shards (the driver, before lending it)."""
    box.update(applied=0, ready=threading.Condition())
    return box


def applied(box: dict[str, Any] | None) -> None:
    """One more shard applied (the DoFn, in the driver's process only)."""
    if box is None or "ready" not in box:
        return
    with box["ready"]:
        box["applied"] += 1
        box["ready"].notify_all()


class EarlyExport(threading.Thread):
    def __init__(self, box: dict[str, Any], shards: int, directory: Path) -> None:
        super().__init__(name="baton-early-export", daemon=True)
        self.box, self.shards, self.directory = box, shards, directory
        self.saved = False
        self.error: BaseException | None = None
        self._stopped = False

    def run(self) -> None:
        ready = self.box["ready"]
        with ready:
            ready.wait_for(lambda: self._stopped or self.box["applied"] >= self.shards)
            if self.box["applied"] < self.shards or self.box.get("built") is None:
                return
        from baton.graphs.tft import module as tft_module

        try:
            tft_module.save(self.box["built"], self.directory)
            self.saved = True
        except BaseException as exc:  # re-raised by finish(), in the driver's thread
            self.error = exc

    def finish(self) -> bool:
        """Stop waiting, join; True when the SavedModel was written (raises its error)."""
        with self.box["ready"]:
            self._stopped = True
            self.box["ready"].notify_all()
        self.join()
        if self.error is not None:
            raise self.error
        return self.saved
