"""The public surface: `baton.__all__`, lazily resolved, documented in docs/api.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import baton

ROOT = Path(__file__).resolve().parents[1]


def test_all_names_resolve_and_match_the_export_table():
    assert set(baton.__all__) == {"__version__", *baton._EXPORTS}
    for name in baton.__all__:
        assert getattr(baton, name) is not None, name
    assert sorted(dir(baton)) == sorted(baton.__all__)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        baton.nope  # noqa: B018


def test_docs_api_lists_every_public_name():
    text = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"`baton\.(\w+)", text))
    assert set(baton.__all__) <= documented, set(baton.__all__) - documented


def test_import_baton_loads_nothing_heavy(tmp_path):
    code = ("import sys, baton\n"
            "heavy = [m for m in ('tensorflow', 'apache_beam', 'yaml', 'keras', 'baton.pipeline')"
            " if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_one_error_root_and_exit_codes():
    from baton import errors

    for cls in (baton.SpecError, baton.ConfigError, baton.UsageError, baton.StageError):
        assert issubclass(cls, baton.BatonError)
    assert baton.SpecError.exit_code == baton.UsageError.exit_code == errors.EXIT_USAGE == 2
    assert baton.ConfigError("a.b", "bad").path == "a.b"
    assert str(baton.ConfigError("file x: bad")) == "file x: bad"
    # a stop, not an error: no `except Exception` swallows it
    assert issubclass(baton.Preempted, KeyboardInterrupt)
    assert not issubclass(baton.Preempted, Exception)
    assert baton.Preempted(step=7).exit_code == errors.EXIT_PREEMPTED == 143
    assert baton.Preempted(step=7).step == 7


def test_every_error_class_in_the_product_has_the_one_root():
    """No second hierarchy: every public exception class defined under baton.* derives from
    BatonError (or is the Preempted stop)."""
    import importlib
    import pkgutil

    seen = []
    for top in ("pipeline", "graphs", "strategies", "serving", "k8s"):
        pkg = importlib.import_module(f"baton.{top}")
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if m.name.endswith("__main__"):
                continue
            mod = importlib.import_module(m.name)
            for obj in vars(mod).values():
                if (isinstance(obj, type) and issubclass(obj, BaseException)
                        and obj.__module__ == mod.__name__):
                    seen.append(obj)
    assert seen
    # private classes (`_Reject`) are control flow inside one module and never reach a user
    stray = [f"{c.__module__}.{c.__qualname__}" for c in seen
             if not c.__name__.startswith("_")
             and not issubclass(c, (baton.BatonError, baton.Preempted))]
    assert not stray, stray
