"""Where a Beam worker gets the transform's preprocessing function from.

The DoFns of `beam_tft` are pickled to their workers, which may be other processes or other
machines; they carry a *source* of the function, not the function, and call `load()` in
`setup`. A source is small, picklable and names itself for error messages (`where`):

- `UserFn`: the user's `"module:function"`, imported in the worker (the spec's directory on
  its search path);
- `graphs.column_kinds.ColumnsFn`: the built-in column kinds, a preprocessing_fn made from the
  stage's column plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


class FnSource(Protocol):
    where: str

    def load(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class UserFn:
    ref: str
    search_dir: str | None

    @property
    def where(self) -> str:
        return f"transform.preprocessing_fn {self.ref}"

    def load(self) -> Any:
        from baton.graphs.user_refs import import_ref

        return import_ref(self.ref, self.search_dir, what="preprocessing_fn")
