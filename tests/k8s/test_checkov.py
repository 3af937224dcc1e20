"""checkov on the generated manifests, every target, all kinds (issue 33).

checkov (Bridgecrew/Prisma's policy scanner, the one the security probe ran: 198 failed checks
then) checks built-in kinds only: it skips a JobSet, a TrainJob, its runtime and a TFJob. So it
also scans what their controllers create from them: the batch/v1 Jobs of every replicated job
(JobSet, and the JobSet Trainer makes of a TrainJob and its runtime), and the Pods of every
TFJob replica type. Only the checks justified in docs/kubernetes.md may fail: CKV_K8S_43 ("Image
should use digest") when no digest was given, and on a TFJob's replica Pods (checkov does not
apply them to Jobs) CKV_K8S_8 / CKV_K8S_9 (liveness / readiness probes: a training task is no
service, and a probe on its gRPC port would kill a task still importing TensorFlow, or one that
runs alone without a server); with `--image` and `--serving-image` pinned by digest, only those.

checkov pins its own dependencies, so it lives in a virtualenv of its own, `.venv-checkov`,
created here with uv on first use (a few seconds from uv's cache; measured in
docs/kubernetes.md) and kept, as bench/'s peer venvs are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from baton.k8s import trainer_controller
from baton.k8s.security import pod_templates

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-checkov"
CHECKOV = "checkov==3.3.30"
JUSTIFIED = {"CKV_K8S_43"}  # docs/kubernetes.md: "Image should use digest" without --image@sha256
PROBES = {"CKV_K8S_8", "CKV_K8S_9"}  # liveness, readiness: on a TFJob's training Pods only
DIGEST = "@sha256:" + "0123456789abcdef" * 4


def _checkov() -> Path:
    exe = VENV / "bin" / "checkov"
    if exe.exists():
        return exe
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        subprocess.run([str(uv), "venv", "-q", str(VENV)], check=True, timeout=300)
        subprocess.run([str(uv), "pip", "install", "-q", "--python", str(VENV / "bin" / "python"),
                        CHECKOV], check=True, timeout=600)
    else:  # no uv: the slower pip
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", CHECKOV], check=True, timeout=900)
    return exe


def _controllers_make(out: Path, made: Path) -> int:
    """Write what the controllers would create from the custom resources in `out` (Jobs from a
    JobSet, the JobSet of a TrainJob then its Jobs, Pods from a TFJob); returns the count."""
    docs = [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    jobsets = [d for d in docs if d["kind"] == "JobSet"]
    for tj in (d for d in docs if d["kind"] == "TrainJob"):
        jobsets.append(trainer_controller.to_jobset(tj, trainer_controller.find_runtime(tj, docs)))
    objects = []
    for js in jobsets:
        name, ns = js["metadata"]["name"], js["metadata"]["namespace"]
        for rj in js["spec"]["replicatedJobs"]:
            objects.append({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": f"{name}-{rj['name']}-0", "namespace": ns},
                            "spec": rj["template"]["spec"]})
    for tf in (d for d in docs if d["kind"] == "TFJob"):
        for path, tmpl in pod_templates(tf):
            rtype = path.split(".")[2].lower()
            objects.append({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": f"{tf['metadata']['name']}-{rtype}-0",
                                         "namespace": tf["metadata"]["namespace"],
                                         "labels": tmpl["metadata"]["labels"]},
                            "spec": tmpl["spec"]})
    made.mkdir(parents=True)
    for i, obj in enumerate(objects):
        (made / f"{i:02d}-{obj['kind'].lower()}.yaml").write_text(yaml.safe_dump(obj))
    return len(objects)


def _generate(root: Path, strategies: list[list[str]], *flags: str) -> None:
    from baton.pipeline.cli import main as baton

    for target in ("jobset", "trainjob", "tfjob"):
        for strategy in strategies:
            out = root / f"{target}-{strategy[1]}"
            assert baton(["k8s", "--out", str(out), "--run-id", "r1", "--namespace", "ml",
                          "--target", target, *strategy, *flags]) == 0
            assert _controllers_make(out, root / "made" / out.name) > 0


MWM = ["--strategy", "multi_worker_mirrored", "--workers", "2"]
PS = ["--strategy", "parameter_server", "--workers", "2", "--ps", "1"]


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> tuple[dict[str, list[str]], dict]:
    """One checkov scan (about a minute on 2 loaded cores) of: every target and strategy with
    the default images (`plain/`), and every target with images pinned by digest (`digest/`)."""
    root = tmp_path_factory.mktemp("checkov")
    _generate(root / "plain", [MWM, PS])
    _generate(root / "digest", [MWM], "--image", f"reg.io/ml/baton{DIGEST}",
              "--serving-image", f"tensorflow/serving{DIGEST}")
    proc = subprocess.run([str(_checkov()), "-d", str(root), "--framework", "kubernetes",
                           "--quiet", "--compact", "-o", "json"],
                          capture_output=True, text=True, timeout=500)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed: dict[str, list[str]] = {}
    for r in reports:
        for f in r["results"]["failed_checks"]:
            failed.setdefault(f["check_id"], []).append(f"{f['file_path']}:{f['resource']}")
    return failed, reports[0]["summary"]


def _under(failed: dict[str, list[str]], prefix: str) -> dict[str, list[str]]:
    out = {k: [w for w in v if w.startswith(prefix)] for k, v in failed.items()}
    return {k: v for k, v in out.items() if v}


def _only_tfjob_pods_lack_probes(failed: dict[str, list[str]]) -> None:
    for check in PROBES:
        for where in failed.get(check, []):
            assert "/made/tfjob-" in where and ":Pod." in where, (check, where)


def test_only_justified_checks_fail_on_every_target(scanned):
    failed, summary = scanned
    assert summary["parsing_errors"] == 0 and summary["passed"] > 2000, summary
    plain = _under(failed, "/plain/")
    assert set(plain) <= JUSTIFIED | PROBES, {k: v[:3] for k, v in plain.items()}
    _only_tfjob_pods_lack_probes(plain)


def test_with_images_pinned_by_digest_only_the_probes_of_tfjob_pods_fail(scanned):
    failed, summary = scanned
    digest = _under(failed, "/digest/")
    assert set(digest) <= PROBES, {k: v[:3] for k, v in digest.items()}
    _only_tfjob_pods_lack_probes(digest)
    assert summary["resource_count"] > 150, summary
