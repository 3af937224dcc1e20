"""Where a Beam worker gets the transform's preprocessing function from.

The DoFns of `beam.tft` are pickled to their workers, which may be other processes or other
machines; they carry a *source* of the function, not the function, and call `load()` in
`setup`. A source is small, picklable and names itself for error messages (`where`):

- `UserFn`: the user's `"module:function"`. `UserFn.staged(ref, spec_dir)` also carries the
  user's code: the function's module and every module it imports from beside the spec (the
  files `pipeline.user_code.user_code_files` finds for the cache key), zipped under their paths
  relative to the spec's directory;
- `graphs.column_kinds.ColumnsFn`: the built-in column kinds, a preprocessing_fn made from the
  stage's column plan.

Staged code travels inside the pickled DoFn, i.e. inside the pipeline itself, so it reaches
every worker any runner starts (Flink, Spark, Dataflow, Beam's Python worker pool) with no
artifact staging, no shared file system and no installation step; Beam's `--extra_package` /
`--setup_file` instead need the SDK container's boot program to pip-install them, which Beam's
Python worker pool (`worker_pool_main`) does not run. The modules keep the names the user
wrote (no `user_module_0` renaming, the tf.Transform-in-TFX failure), so pickled references
and `from helpers import X` resolve as on the submitting machine.

`load()` imports the module from the spec's directory when the worker sees it with the same
bytes (the in-process runner, a shared volume: the user's real file, in tracebacks too), else
from a private copy extracted once per process into a temporary directory. A module of the
same name already imported with other bytes (a stale copy, another spec's helper) is dropped
from `sys.modules` first, so the staged code is what runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import threading
import zipfile
from pathlib import Path
from typing import Any, Protocol

_LOCK = threading.Lock()  # DoFn setups run on several threads of one worker
_EXTRACTED: dict[str, str] = {}  # digest of the staged zip -> its directory in this process


class FnSource(Protocol):
    @property
    def where(self) -> str: ...  # read-only: a property or a plain attribute both fit

    def load(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class UserFn:
    ref: str
    search_dir: str | None
    code: bytes | None = dataclasses.field(default=None, repr=False)  # zip, see `staged`

    @classmethod
    def staged(cls, ref: str, spec_dir: Path | str | None) -> UserFn:
        """The reference plus the user's modules beside `spec_dir`, packed for the workers.

        A module that does not import (or lies outside the spec's directory: an installed
        package, which workers must have installed, as Baton itself) is not packed; `load()`
        then raises (or imports) it as an unstaged source does."""
        from baton.graphs.user_refs import RefError
        from baton.pipeline.user_code import user_code_files

        search = str(spec_dir) if spec_dir else None
        if spec_dir is None:
            return cls(ref, None)
        root = Path(spec_dir).resolve()
        try:
            files = user_code_files([ref], root)
        except RefError:
            return cls(ref, search)
        if not files:
            return cls(ref, search)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                info = zipfile.ZipInfo(path.relative_to(root).as_posix(), (1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
        return cls(ref, search, buf.getvalue())

    @property
    def where(self) -> str:
        return f"transform.preprocessing_fn {self.ref}"

    @property
    def staged_files(self) -> list[str]:
        """Paths (relative to the spec's directory) of the modules this source carries."""
        if self.code is None:
            return []
        with zipfile.ZipFile(io.BytesIO(self.code)) as zf:
            return zf.namelist()

    def load(self) -> Any:
        from baton.graphs.user_refs import import_ref

        if self.code is None:
            return import_ref(self.ref, self.search_dir, what="preprocessing_fn")
        with _LOCK:
            files = _unzip(self.code)
            root = self.search_dir if _same_files(self.search_dir, files) else _extract(
                self.code, files)
            _forget_other_copies(files)
            fn = import_ref(self.ref, root, what="preprocessing_fn")
            _check_imported(self.ref, files)
            return fn


def _unzip(code: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(code)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _same_files(directory: str | None, files: dict[str, bytes]) -> bool:
    if not directory or not Path(directory).is_dir():
        return False
    try:
        return all((Path(directory) / name).read_bytes() == data for name, data in files.items())
    except OSError:
        return False


def _extract(code: bytes, files: dict[str, bytes]) -> str:
    """A private directory (0700, this process's) holding the staged modules; removed at exit."""
    import atexit
    import shutil
    import tempfile

    digest = hashlib.sha256(code).hexdigest()[:16]
    if digest not in _EXTRACTED:
        out = Path(tempfile.mkdtemp(prefix=f"baton-user-code-{digest}-"))
        for name, data in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(data)
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        _EXTRACTED[digest] = str(out)
    return _EXTRACTED[digest]


def _module_name(name: str) -> str:
    parts = name.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _file_bytes(module: Any) -> bytes | None:
    file = getattr(module, "__file__", None)
    try:
        return Path(file).read_bytes() if file else None
    except OSError:
        return None


def _forget_other_copies(files: dict[str, bytes]) -> None:
    """Drop already-imported modules of the staged names whose source differs from the staged."""
    import importlib
    import sys

    for name, data in files.items():
        module = sys.modules.get(_module_name(name))
        if module is not None and _file_bytes(module) != data:
            del sys.modules[_module_name(name)]
    importlib.invalidate_caches()


def _check_imported(ref: str, files: dict[str, bytes]) -> None:
    """The function's module must be the staged one, not a namesake earlier on sys.path."""
    import sys

    from baton.graphs.user_refs import RefError

    mod_name = ref.partition(":")[0]
    for name, data in files.items():
        if _module_name(name) != mod_name:
            continue
        module = sys.modules.get(mod_name)
        if module is not None and _file_bytes(module) != data:
            raise RefError(f"module {mod_name!r} was imported from "
                           f"{getattr(module, '__file__', '?')}, not from the spec's {name}: "
                           "a module of that name comes earlier on this worker's sys.path")
