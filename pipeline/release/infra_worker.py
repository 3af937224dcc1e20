"""The fresh process of infra-validation: `python -m baton.pipeline.release.infra_worker DIR OUT`.

Loads the SavedModel at DIR with TensorFlow alone (no Keras, no Baton objects), replays its
`assets.extra/tf_serving_warmup_requests` through the signatures each request names, and writes
a JSON report to OUT: {"outputs": [...], "load_seconds", "latency_ms"} or {"error": "..."}.
It always tries to write OUT, so the parent reports the real reason rather than an exit code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from baton.errors import EXIT_FAILED, EXIT_OK


def main(argv: list[str]) -> int:
    model_dir, out = Path(argv[0]), Path(argv[1])
    try:
        report = validate(model_dir)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the report's message
        report = {"error": f"{type(exc).__name__}: {exc}".strip()[:2000]}
    out.write_text(json.dumps(report))
    return EXIT_OK if "error" not in report else EXIT_FAILED


def validate(model_dir: Path) -> dict:
    import tensorflow as tf

    from baton.graphs.signatures import ASSETS_EXTRA, WARMUP_FILE, read_warmup, run_log

    start = time.perf_counter()
    try:
        loaded = tf.saved_model.load(str(model_dir))
    except Exception as exc:  # noqa: BLE001
        return {"error": f"TensorFlow cannot load the SavedModel: {type(exc).__name__}: "
                         f"{str(exc).strip().splitlines()[0][:500]}"}
    load_s = time.perf_counter() - start
    warmup = model_dir / ASSETS_EXTRA / WARMUP_FILE
    if not warmup.is_file():
        return {"error": f"warmup file {warmup} is missing"}
    try:
        logs = read_warmup(warmup)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"warmup file {warmup} is corrupt: {exc}"}
    outputs, times = [], []
    for i, log in enumerate(logs):
        t = time.perf_counter()
        try:
            result = run_log(loaded, log)
        except Exception as exc:  # noqa: BLE001
            msg = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
            return {"error": f"warmup request {i} ({log.WhichOneof('log_type')}) failed: "
                             f"{type(exc).__name__}: {msg}"}
        times.append(time.perf_counter() - t)
        outputs.append({k: _jsonable(v) for k, v in result.items()})
    return {"outputs": outputs, "load_seconds": load_s, "requests": len(logs),
            "latency_ms": 1000 * sorted(times)[len(times) // 2] if times else None}


def _jsonable(value):
    if value.dtype == object:
        return [[x.decode() for x in row] if value.ndim == 2 else row.decode() for row in value]
    return value.tolist()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
