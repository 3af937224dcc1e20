"""`python -m baton.storage.pull`: a SuperNode's init container copies its silo from a real S3
server (SeaweedFS) only once the silo is complete (its schema.json, written last, exists), and
puts schema.json in place last, so the SuperNode never sees half an examples artifact."""

from __future__ import annotations

import threading
import time

from baton.storage import location as L
from baton.storage import objects, pull


def test_it_waits_for_the_last_object_then_copies_the_tree(s3, tmp_path, capsys):
    silo = L.join(s3, "runs", "fed", "r1", "fl.federation", "clients", "client-0")
    objects.write_bytes(L.join(silo, "train", "part-0.tfrecord.gz"), b"shard-0")
    objects.write_bytes(L.join(silo, "eval", "part-0.tfrecord.gz"), b"eval-0")
    dest = tmp_path / "data"
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(
        pull.main(["--after", "schema.json", "--every", "0.05", silo, str(dest)])))
    t.start()
    time.sleep(1.0)
    assert not done and not (dest / "schema.json").exists()  # the silo is not complete yet
    objects.write_bytes(L.join(silo, "schema.json"), b'{"columns": []}')
    t.join(timeout=60)
    assert done == [0]
    assert (dest / "train" / "part-0.tfrecord.gz").read_bytes() == b"shard-0"
    assert (dest / "eval" / "part-0.tfrecord.gz").read_bytes() == b"eval-0"
    assert (dest / "schema.json").read_bytes() == b'{"columns": []}'
    assert not list(dest.rglob("*.part"))
    assert "waiting for inputs: s3://" in capsys.readouterr().out


def test_schema_json_is_placed_after_every_other_file(s3, tmp_path, monkeypatch):
    silo = L.join(s3, "silo")
    for name in ("a", "schema.json", "z/b"):
        objects.write_bytes(L.join(silo, name), name.encode())
    order: list[str] = []
    real = objects.read_bytes
    monkeypatch.setattr(objects, "read_bytes", lambda loc: order.append(loc) or real(loc))
    assert pull.pull(silo, tmp_path / "d", "schema.json") == 3
    assert order[-1].endswith("/schema.json") and len(order) == 3


def test_a_missing_bucket_exits_1_naming_the_url(s3, tmp_path, capsys):
    missing = "s3://no-such-bucket-baton-pull/silo"
    assert pull.main(["--after", "schema.json", missing, str(tmp_path / "d")]) == 1
    assert "no-such-bucket-baton-pull" in capsys.readouterr().err
