"""`make bench`: run every benchmark (each runs its peers side by side), then assemble
docs/benchmarks.md from the per-area result files they write (docs/benchmarks-<area>.md).

Each area is a directory under bench/ with a `run_bench.py`; they run one after another so
they never compete for the two cores. `--only AREA` runs one area; `--assemble` only rebuilds
the document from existing results.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = """# Benchmarks

Every figure here comes from a script under `bench/` that runs Baton and the named peer in the
same run, on the same data and machine (2 cores, no GPU), so the ratios are what matter; absolute
numbers move with the machine. Regenerate with `make bench` (or `python bench/run_all.py --only
AREA`). Each section below is written by its area's script.
"""


def areas() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "bench").glob("*/run_bench.py"))


def assemble() -> Path:
    parts = [HEADER]
    for f in sorted((ROOT / "docs").glob("benchmarks-*.md")):
        text = f.read_text().strip()
        if text.startswith("# "):  # an area file with its own title: nest it under ours
            text = "\n".join("#" + line if line.startswith("#") else line
                              for line in text.splitlines())
        parts.append(text + "\n")
    out = ROOT / "docs" / "benchmarks.md"
    out.write_text("\n".join(parts))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", help="area name (directory under bench/)")
    p.add_argument("--assemble", action="store_true", help="only rebuild docs/benchmarks.md")
    args = p.parse_args()
    failed = []
    if not args.assemble:
        for area in areas():
            if args.only and area.name not in args.only:
                continue
            print(f"== bench/{area.name}", flush=True)
            t0 = time.monotonic()
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
            rc = subprocess.call([sys.executable, str(area / "run_bench.py")], cwd=ROOT, env=env)
            print(f"== bench/{area.name}: exit {rc} in {time.monotonic() - t0:.0f}s", flush=True)
            if rc:
                failed.append(area.name)
    print(f"wrote {assemble()}")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
