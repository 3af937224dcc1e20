"""The checked-in kustomize base and overlays stay valid (no kustomize binary here: the
overlays' JSON6902 patches are applied by a tiny RFC 6902 subset and the result validated)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from baton.k8s.validate import validate_doc, validate_file

K8S = Path(__file__).resolve().parents[2] / "k8s"


def _docs(base: Path) -> list[dict]:
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    return [d for r in kust["resources"] for d in yaml.safe_load_all((base / r).read_text()) if d]


def _apply(doc: dict, ops: list[dict]) -> dict:
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        assert op["op"] in ("add", "replace")
        if op["op"] == "replace":
            assert (int(last) < len(node)) if isinstance(node, list) else last in node, op["path"]
        if isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            node[last] = op["value"]
    return doc


def test_base_validates():
    assert validate_file(K8S / "base") == []
    kinds = {d["kind"] for d in _docs(K8S / "base")}
    assert {"JobSet", "Namespace", "NetworkPolicy", "Deployment", "Service",
            "PersistentVolumeClaim"} <= kinds


@pytest.mark.parametrize("overlay", sorted(p.name for p in (K8S / "overlays").iterdir()))
def test_overlay_patches_apply_and_validate(overlay):
    root = K8S / "overlays" / overlay
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert kust["resources"] == ["../../base"]
    docs = _docs(K8S / "base")
    for patch in kust.get("patches", []):
        t = patch["target"]
        matches = [i for i, d in enumerate(docs)
                   if d["kind"] == t["kind"] and d["metadata"]["name"] == t["name"]]
        assert matches, f"{overlay}: patch target {t} is not in the base"
        ops = yaml.safe_load((root / patch["path"]).read_text())
        for i in matches:
            docs[i] = _apply(docs[i], ops)
    for d in docs:
        if kust.get("namespace") and d["kind"] == "Namespace":  # kustomize renames it
            d["metadata"]["name"] = kust["namespace"]
        elif kust.get("namespace"):
            d["metadata"]["namespace"] = kust["namespace"]
        assert validate_doc(d) == [], (overlay, d["kind"])


def test_base_is_what_the_generator_writes_now(tmp_path):
    """k8s/base is `baton k8s --out k8s/base --strategy multi_worker_mirrored --workers 2
    --run-id base` (docs/kubernetes.md): a generator change without regenerating it fails here."""
    from baton.pipeline.commands.k8s import main

    assert main(["--out", str(tmp_path), "--strategy", "multi_worker_mirrored", "--workers", "2",
                 "--run-id", "base"]) == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.yaml"))
    assert written == sorted(p.relative_to(K8S / "base") for p in (K8S / "base").rglob("*.yaml"))
    for rel in written:
        assert (tmp_path / rel).read_text() == (K8S / "base" / rel).read_text(), rel
