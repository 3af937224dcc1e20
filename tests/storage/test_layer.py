"""The storage layer against real servers: SeaweedFS's S3 API and fake-gcs-server's GCS API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from baton.errors import UsageError
from baton.storage import location as L
from baton.storage import manifest as M
from baton.storage import node_cache, objects, trees
from baton.storage.filesystems import StorageError, check_bucket


def test_locations_parse_join_and_refuse_by_name(tmp_path):
    assert L.is_remote("s3://b-1/x") and L.is_remote("gs://bkt/x") and not L.is_remote("/tmp/x")
    assert str(L.parse("s3://my-bucket//a/b/")) == "s3://my-bucket/a/b"
    assert L.join("s3://bkt/a/", "b", "c/d") == "s3://bkt/a/b/c/d"
    assert L.join(str(tmp_path), "x") == str(tmp_path / "x")
    assert L.normalize("gs://bkt/a//b/") == "gs://bkt/a/b"
    assert L.normalize("file:///tmp/x") == "/tmp/x"
    assert L.from_path(Path("s3://bkt/models")) == "s3://bkt/models"
    assert L.parent("s3://bkt/a/b") == "s3://bkt/a" and L.basename("s3://bkt/a/b") == "b"
    assert L.relative("s3://bkt/a/b/c", "s3://bkt/a") == "b/c"
    with pytest.raises(UsageError, match=r"--runs-dir: hdfs:// is not supported.*'hdfs://x/y'"):
        L.normalize("hdfs://x/y", "--runs-dir")
    with pytest.raises(UsageError, match="no valid bucket name"):
        L.parse("s3://", "--runs-dir")
    with pytest.raises(UsageError, match=r"'\.' or '\.\.'"):
        L.parse("s3://bkt/a/../b")


def test_objects_round_trip_on_s3(s3):
    loc = L.join(s3, "runs", "a.json")
    assert objects.read_json(loc) is None and not objects.exists(loc)
    objects.write_json(loc, {"x": 1})
    assert objects.read_json(loc) == {"x": 1} and objects.exists(loc)
    objects.write_bytes(L.join(s3, "runs", "d", "f.bin"), b"abc")
    assert objects.list_tree(L.join(s3, "runs")) == {"a.json": len(json.dumps({"x": 1}, indent=2)) + 1, "d/f.bin": 3}
    assert objects.list_children(L.join(s3, "runs")) == {"a.json": False, "d": True}
    objects.delete_tree(L.join(s3, "runs"))
    assert objects.list_tree(L.join(s3, "runs")) == {}
    with pytest.raises(FileNotFoundError):
        objects.read_bytes(loc)


def test_wrong_credentials_are_one_line_naming_the_url(s3, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    loc = L.join(s3, "x.json")
    for call in (lambda: objects.write_json(loc, {}), lambda: objects.read_bytes(loc),
                 lambda: check_bucket(loc, "--runs-dir")):
        with pytest.raises(StorageError) as e:
            call()
        text = str(e.value)
        assert "\n" not in text and s3 in text, text
        assert "access denied" in text and "AWS_ACCESS_KEY_ID" in text, text


def test_missing_bucket_is_one_line_naming_the_url(s3):
    loc = "s3://no-such-bucket-baton/runs/x.json"
    with pytest.raises(StorageError, match=r"^--runs-dir: cannot use s3://no-such-bucket-baton"
                       r"/runs/x.json: bucket 'no-such-bucket-baton' does not exist$"):
        check_bucket(loc, "--runs-dir")
    with pytest.raises(StorageError, match=r"cannot write s3://no-such-bucket-baton/runs/x.json: "
                       r"bucket 'no-such-bucket-baton' does not exist$"):
        objects.write_json(loc, {})
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-baton' does not exist$"):
        objects.read_bytes(loc)


def test_unreachable_endpoint_names_it(s3, monkeypatch):
    from baton.strategies.cluster import free_ports

    endpoint = f"http://127.0.0.1:{free_ports(1)[0]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with pytest.raises(StorageError, match=rf"^cannot write {s3}/x: cannot reach {endpoint}: "):
        objects.write_bytes(L.join(s3, "x"), b"x")


def test_manifest_digest_is_the_local_content_hash(tmp_path):
    from baton.pipeline import store

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_text("c")
    (tmp_path / "a" / "d.bin").write_bytes(os.urandom(3000))
    (tmp_path / "a" / ".tmp-x").mkdir()
    (tmp_path / "a" / ".tmp-x" / "junk").write_text("j")
    m = M.of_directory(tmp_path / "a")
    assert sorted(m) == ["b/c.txt", "d.bin"]
    assert M.digest(m) == store.hash_path(tmp_path / "a")


def test_trees_upload_download_through_the_node_cache(s3, tmp_path):
    src = tmp_path / "src"
    (src / "variables").mkdir(parents=True)
    (src / "variables" / "v.data").write_bytes(os.urandom(100_000))
    (src / "saved_model.pb").write_bytes(b"graph")
    m = M.of_directory(src)
    prefix = L.join(s3, "art")
    trees.upload(src, prefix, m, groups=[trees.is_under("saved_model.pb")])
    assert objects.list_tree(prefix) == {r: e["size"] for r, e in m.items()}
    # uploaded files were adopted: a download on this node fetches nothing
    assert all(node_cache.object_path(e["sha256"]).is_file() for e in m.values())
    os.environ["BATON_CACHE_DIR"] = str(tmp_path / "other-node")
    dest = tmp_path / "dest"
    trees.download(m, dest, lambda rel, _e: L.join(prefix, rel))
    assert M.of_directory(dest) == m
    assert os.stat(dest / "saved_model.pb").st_mode & 0o222 == 0  # staged inputs: read-only
    # an object replaced after its manifest was written is refused, naming it
    objects.write_bytes(L.join(prefix, "saved_model.pb"), b"other")
    os.environ["BATON_CACHE_DIR"] = str(tmp_path / "third-node")
    with pytest.raises(StorageError, match=r"saved_model.pb: its content does not match the "
                       r"manifest"):
        trees.download(m, tmp_path / "dest2", lambda rel, _e: L.join(prefix, rel))
    assert not node_cache.object_path(m["saved_model.pb"]["sha256"]).exists()


def test_gcs_through_the_same_layer(tmp_path, monkeypatch):
    from baton.storage.testing import LocalGcs

    if LocalGcs.binary() is None:
        pytest.fail("fake-gcs-server is not installed (the dev extra installs it)")
    from baton.strategies.cluster import free_ports

    with LocalGcs(free_ports(1)[0]).start() as gcs:
        for k, v in gcs.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "cache"))
        bucket = gcs.bucket("baton-gcs")
        loc = L.join(bucket, "p", "x.json")
        objects.write_json(loc, {"y": 2})
        assert objects.read_json(loc) == {"y": 2}
        src = tmp_path / "src"
        src.mkdir()
        (src / "f").write_bytes(b"data")
        m = M.of_directory(src)
        trees.upload(src, L.join(bucket, "t"), m)
        monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "cache2"))
        trees.download(m, tmp_path / "d", lambda rel, _e: L.join(bucket, "t", rel))
        assert (tmp_path / "d" / "f").read_bytes() == b"data"
        with pytest.raises(StorageError, match="bucket 'no-such-gcs-bucket' does not exist"):
            check_bucket("gs://no-such-gcs-bucket/x", "--runs-dir")
