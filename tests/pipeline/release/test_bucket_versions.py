"""Serving versions on a real S3 server (SeaweedFS): push, prune, rollback, and faults."""

from __future__ import annotations

import threading

import pytest

from baton.errors import BatonError, StorageError
from baton.pipeline.commands import rollback
from baton.pipeline.release import pushing
from baton.pipeline.release import versions as V
from baton.storage import location as L
from baton.storage import model_versions as MV
from baton.storage import objects
from tests.pipeline.release.test_versions import _model


def test_pushes_keep_tf_servings_layout_and_commit_last(s3, tmp_path, monkeypatch):
    base = L.join(s3, "models", "m")
    order: list[str] = []
    real_upload, real_write = objects.upload_file, objects.write_bytes
    monkeypatch.setattr(objects, "upload_file",
                        lambda local, loc: (order.append(L.relative(loc, base)),
                                            real_upload(local, loc))[1])
    monkeypatch.setattr(objects, "write_bytes",
                        lambda loc, data: (order.append(L.relative(loc, base)),
                                           real_write(loc, data))[1])
    m0 = _model(tmp_path, "m0")
    first = pushing.push(m0, base, keep=2, info={"run_id": "r0"})
    assert first["pushed"] and first["version"] == 1 and first["path"] == f"{base}/1"
    # pending marker first, the variables, then the graph, then the commit
    assert order[0] == "1/assets.extra/baton_push.pending"
    assert order[-1] == "1/assets.extra/baton_push.json"
    assert order.index("1/saved_model.pb") > order.index("1/variables/variables.index")
    tree = objects.list_tree(L.join(base, "1"))
    assert {"saved_model.pb", "variables/variables.index",
            "variables/variables.data-00000-of-00001"} <= set(tree)
    commit = MV.read_commit(base, "1")
    assert commit["run_id"] == "r0" and commit["version"] == 1
    assert set(commit["files"]) == {"saved_model.pb", "variables/variables.index",
                                    "variables/variables.data-00000-of-00001"}
    # the same content again: no new version; new content: version 2, 3; keep=2 prunes 1
    assert not pushing.push(m0, base, keep=2)["pushed"]
    pushing.push(_model(tmp_path, "m1"), base, keep=2)
    third = pushing.push(_model(tmp_path, "m2"), base, keep=2)
    assert third["version"] == 3 and third["removed"] == [1]
    assert V.versions(base) == [2, 3] and objects.list_tree(L.join(base, "1")) == {}
    assert pushing.push(_model(tmp_path, "m9"), base, proposed_version=10)["version"] == 10


def test_rollback_on_a_bucket_sets_versions_aside(s3, tmp_path, capsys):
    base = L.join(s3, "models", "m")
    for i in range(3):
        pushing.push(_model(tmp_path, f"m{i}"), base)
    assert rollback.main([base, "--to", "1"]) == 0
    assert "rolled back" in capsys.readouterr().out
    assert V.versions(base) == [1] and V.rolled_back(base) == [2, 3]
    kept = objects.list_tree(L.join(base, ".rolledback-3"))
    assert "saved_model.pb" in kept and MV.COMMIT in kept  # the data stays for a roll-forward
    assert objects.list_tree(L.join(base, "3")) == {}
    # numbers once served are never reused
    assert pushing.push(_model(tmp_path, "m7"), base)["version"] == 4
    rollback.main([base, "--list"])
    assert "versions [1, 4]" in capsys.readouterr().out
    with pytest.raises(BatonError, match="version 9 is not in"):
        rollback.main([base, "--to", "9"])
    with pytest.raises(StorageError, match=r"^MODEL_DIR: cannot use s3://no-such-bucket-x/m: "
                       r"bucket 'no-such-bucket-x' does not exist$"):
        rollback.main(["s3://no-such-bucket-x/m"])


def test_a_reader_polling_during_a_push_never_sees_a_half_version(s3, tmp_path):
    base = L.join(s3, "models", "m")
    pushing.push(_model(tmp_path, "m0", size=50_000), base)
    seen: list[tuple[int, bool]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            found, _ = MV.scan(base)
            for v, info in found.items():
                if info.state == MV.COMMITTED:
                    commit = MV.read_commit(base, info.name) or {}
                    files = objects.list_tree(L.join(base, info.name))
                    seen.append((v, all(files.get(rel) == e["size"]
                                        for rel, e in commit["files"].items())))
                else:
                    seen.append((v, True))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for i in range(1, 4):
            pushing.push(_model(tmp_path, f"m{i}", size=2_000_000), base, keep=2)
    finally:
        stop.set()
        reader.join()
    assert seen and all(complete for _, complete in seen)
    assert {v for v, _ in seen} >= {1, 2}


def test_a_push_stopped_midway_leaves_a_pending_version_no_one_loads(tmp_path, monkeypatch):
    """The server stopped mid-push: the push fails naming the URL; the half version is
    pending (never committed), a rerun pushes a new version above it, and a later push sweeps
    it once it is stale."""
    from baton.storage.testing import LocalS3
    from baton.strategies.cluster import free_ports

    with LocalS3(free_ports(LocalS3.PORTS)).start() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        base = L.join(server.bucket("push-faults"), "models", "m")
        real = objects.upload_file
        calls = []

        def stop_midway(local, loc):
            real(local, loc)
            calls.append(loc)
            if len(calls) == 1:
                server.stop()

        monkeypatch.setattr(objects, "upload_file", stop_midway)
        m0 = _model(tmp_path, "m0")
        with pytest.raises(StorageError, match=rf"^cannot (upload to|write) {base}/1/[^\n]*: "
                           r"(cannot reach http://127\.0\.0\.1|the store failed)[^\n]*$"):
            pushing.push(m0, base)
        monkeypatch.setattr(objects, "upload_file", real)
        server.start()
        found, _ = MV.scan(base)
        assert found[1].state == MV.PENDING_STATE and V.versions(base) == []
        again = pushing.push(m0, base)
        assert again["version"] == 2 and V.versions(base) == [2]
        monkeypatch.setattr(MV, "STALE_S", 0.0)
        pushing.push(_model(tmp_path, "m1"), base)
        assert 1 not in MV.scan(base)[0] and V.versions(base) == [2, 3]


def test_a_second_push_racing_for_the_version_is_refused(s3, tmp_path, monkeypatch):
    base = L.join(s3, "models", "m")
    real = objects.upload_file

    def racing(local, loc):
        real(local, loc)
        if loc.endswith("saved_model.pb"):  # another pusher claims version 1 meanwhile
            objects.write_json(L.join(base, "1", MV.PENDING), {"token": "theirs"})

    monkeypatch.setattr(objects, "upload_file", racing)
    with pytest.raises(StorageError, match="another push is writing version 1"):
        pushing.push(_model(tmp_path, "m0"), base)
    assert V.versions(base) == []
