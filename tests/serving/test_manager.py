"""Version lifecycle with a fake loader (fast), plus real corrupt/half-copied SavedModels."""

import os
import shutil

import pytest
from conftest import install

from baton.serving.config import ModelConfig, VersionPolicy
from baton.serving.manager import AVAILABLE, END, ModelManager
from baton.serving.status import Code, ServingError


class FakeServable:
    def __init__(self, name, version):
        self.model_name, self.version = name, version


def fake_loader(name, version, path, warmup=True):
    """Loads a version dir whose `ok` file exists; anything else is 'corrupt'."""
    if not os.path.exists(os.path.join(path, "ok")):
        raise ServingError(Code.DATA_LOSS, f"corrupt {path}")
    return FakeServable(name, version)


def put(base, v, ok=True):
    d = os.path.join(base, str(v))
    os.makedirs(d, exist_ok=True)
    if ok:
        open(os.path.join(d, "ok"), "w").close()
    return d


def manager(base, policy=VersionPolicy(), labels=()):
    m = ModelManager([ModelConfig("m", str(base), policy, labels)], poll_seconds=-1,
                     loader=fake_loader, retry_seconds=3600)
    return m


def test_latest_policy_switches_after_successful_load(tmp_path):
    put(tmp_path, 1)
    m = manager(tmp_path)
    m.poll_once()
    assert m.resolve("m").version == 1
    put(tmp_path, 2)
    m.poll_once()
    assert m.resolve("m").version == 2
    assert m.loaded_versions() == {"m": [2]}
    states = {r.version: r.state for r in m.status("m")}
    assert states == {2: AVAILABLE, 1: END}
    with pytest.raises(ServingError, match=r"Specific\(m, 1\)") as e:
        m.resolve("m", version=1)
    assert e.value.code == Code.NOT_FOUND


def test_failed_version_never_replaces_serving_and_is_retried_when_changed(tmp_path):
    put(tmp_path, 1)
    m = manager(tmp_path)
    m.poll_once()
    put(tmp_path, 2, ok=False)  # corrupt / half-copied
    m.poll_once()
    assert m.resolve("m").version == 1
    (rec,) = [r for r in m.status("m") if r.version == 2]
    assert rec.state == END and rec.error.code == Code.DATA_LOSS
    m.poll_once()  # unchanged: not retried (would still fail), still serving 1
    assert m.resolve("m").version == 1
    put(tmp_path, 2)  # the copy completes: directory changed -> retried
    m.poll_once()
    assert m.resolve("m").version == 2


def test_a_copy_that_completes_while_a_load_reads_it_is_retried_at_the_next_poll(tmp_path):
    """The load reads the half copy, the copy completes meanwhile: the attempt fails ("changed
    while loading") and the next poll retries at once, not after retry_seconds (an hour here);
    seen on a loaded CI machine, where a 30 s wait for the version timed out."""
    put(tmp_path, 1)
    put(tmp_path, 2, ok=False)

    def completes_while_loading(name, version, path, warmup=True):
        if version == 2 and not os.path.exists(os.path.join(path, "ok")):
            put(tmp_path, 2)  # the copy finishes while this attempt reads the directory
            raise ServingError(Code.DATA_LOSS, f"truncated {path}")
        return fake_loader(name, version, path, warmup)

    m = ModelManager([ModelConfig("m", str(tmp_path))], poll_seconds=-1,
                     loader=completes_while_loading, retry_seconds=3600)
    m.poll_once()
    assert m.resolve("m").version == 1
    (rec,) = [r for r in m.status("m") if r.version == 2]
    assert rec.state == END
    m.poll_once()
    assert m.resolve("m").version == 2


def test_all_and_specific_policies_and_labels(tmp_path):
    for v in (1, 2, 3):
        put(tmp_path, v)
    m = manager(tmp_path, VersionPolicy("all"), (("stable", 1), ("canary", 3)))
    m.poll_once()
    assert m.loaded_versions() == {"m": [1, 2, 3]}
    assert m.resolve("m").version == 3
    assert m.resolve("m", label="stable").version == 1
    with pytest.raises(ServingError, match="Unrecognized servable version label: beta"):
        m.resolve("m", label="beta")
    m2 = manager(tmp_path, VersionPolicy("specific", versions=(2,)))
    m2.poll_once()
    assert m2.loaded_versions() == {"m": [2]}


def test_removed_directory_is_unloaded_and_unknown_model(tmp_path):
    put(tmp_path, 1)
    put(tmp_path, 2)
    m = manager(tmp_path, VersionPolicy("all"))
    m.poll_once()
    shutil.rmtree(tmp_path / "2")
    m.poll_once()
    assert m.loaded_versions() == {"m": [1]}
    with pytest.raises(ServingError, match=r"Latest\(other\)"):
        m.resolve("other")


def test_reload_config_adds_removes_and_checks_labels(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    put(a, 1)
    put(b, 5)
    m = manager(a)
    m.poll_once()
    m.reload_config([ModelConfig("n", str(b))])
    assert m.model_names == ["n"] and m.resolve("n").version == 5
    with pytest.raises(ServingError) as e:
        m.reload_config([ModelConfig("n", str(b), labels=(("stable", 4),))])
    assert e.value.code == Code.FAILED_PRECONDITION


def test_real_corrupt_and_half_copied_savedmodels(built, tmp_path):
    base = str(tmp_path)
    install(built["penguins1"], base, 1)
    m = ModelManager([ModelConfig("p", base)], poll_seconds=-1)
    m.poll_once()
    assert m.resolve("p").version == 1
    bad = install(built["penguins2"], base, 2)
    with open(os.path.join(bad, "saved_model.pb"), "wb") as f:
        f.write(b"\x00garbage")
    half = install(built["penguins3"], base, 3)
    data = [f for f in os.listdir(os.path.join(half, "variables")) if "data" in f][0]
    path = os.path.join(half, "variables", data)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    m.poll_once()
    assert m.resolve("p").version == 1
    errs = {r.version: r.error for r in m.status("p")}
    assert errs[2] is not None and errs[3] is not None
