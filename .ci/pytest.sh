#!/usr/bin/env bash
# Runs the suite; pytest's exit code 5 ("no tests collected") is a failure, never a pass.
set -u
pytest_bin=${1:-.venv/bin/pytest}
shift || true
"$pytest_bin" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing (exit 5 must not pass silently)" >&2
  exit 1
fi
exit "$rc"
