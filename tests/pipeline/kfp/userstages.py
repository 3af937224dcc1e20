"""A small pipeline of user stages (no TensorFlow) for `baton kfp`'s mechanics: three steps,
a helper module beside the spec, data read from a path the spec names.

`write(directory, data)` writes the spec, its modules and the data; the tests compile it, run
it with kfp.local and edit the helper or the data between runs.
"""

from __future__ import annotations

from pathlib import Path

SPEC = """\
pipeline: numbers
stages:
  - name: produce
    type: numsource:produce
    config: {{data: {data}}}
  - name: scale
    type: numstages:scale
    inputs: {{numbers: produce.numbers}}
    config: {{wait_for: "", factor: 2}}
  - name: report
    type: numstages:report
    inputs: {{scaled: scale.scaled}}
    config: {{fail: false}}
"""

SOURCE = '''\
"""The source stage of the test pipeline: reads the file its config names."""
from pathlib import Path

from baton import stage


def _data(config, spec_dir):
    return [Path(config["data"])]


@stage(outputs=("numbers",), external_inputs=_data)
def produce(ctx, config):
    text = Path(config["data"]).read_text()
    (ctx.output("numbers") / "numbers.txt").write_text(text)
    ctx.record(count=len(text.split()))
'''

STAGES = '''\
"""User stages of the test pipeline: scale uses a helper module, report sums."""
import os
import time
from pathlib import Path

from baton import StageError, stage

import numhelper


@stage(inputs={"numbers": True}, outputs=("scaled",))
def scale(ctx, config):
    flag = config.get("wait_for")
    if flag:  # the kill test: say we started, then wait until the flag file exists
        Path(flag + ".started").write_text(str(os.getpid()))
        while not Path(flag).exists():
            time.sleep(0.05)
    numbers = [int(x) for x in (ctx.inputs["numbers"] / "numbers.txt").read_text().split()]
    scaled = [numhelper.scale(x, int(config["factor"])) for x in numbers]
    (ctx.output("scaled") / "scaled.txt").write_text(" ".join(map(str, scaled)))
    ctx.record(total=sum(scaled))


@stage(inputs={"scaled": True}, outputs=("report",))
def report(ctx, config):
    if config.get("fail"):
        raise StageError("report: the numbers do not add up (the test asked for this failure)")
    total = sum(int(x) for x in (ctx.inputs["scaled"] / "scaled.txt").read_text().split())
    (ctx.output("report") / "total.txt").write_text(str(total))
    ctx.record(total=total)
'''

HELPER = '''\
def scale(x, factor):
    return x * factor
'''


def write(directory: Path, data: str = "1 2 3\n") -> Path:
    """The spec (returned), its three modules and the data file in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.txt").write_text(data)
    (directory / "numsource.py").write_text(SOURCE)
    (directory / "numstages.py").write_text(STAGES)
    (directory / "numhelper.py").write_text(HELPER)
    spec = directory / "pipeline.yaml"
    spec.write_text(SPEC.format(data=directory / "data.txt"))
    return spec
