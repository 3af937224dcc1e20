"""A TrainJob from one flat set of keywords, as the tests write them.

The job's own fields (the data, the resolved strategy and balance, ...) go to `TrainJob`, every
other keyword to its `TrainSettings`; `model_config` is the settings' `model_params`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from baton.strategies.job import TrainJob
from baton.strategies.settings import TrainSettings

JOB_FIELDS = {f.name for f in dataclasses.fields(TrainJob)} - {"settings"}


def train_job(**kw: Any) -> TrainJob:
    if "model_config" in kw:
        kw["model_params"] = kw.pop("model_config")
    for name in ("metrics", "callbacks"):
        if name in kw:
            kw[name] = tuple(kw[name])
    job = {k: kw.pop(k) for k in list(kw) if k in JOB_FIELDS}
    return TrainJob(**job, settings=TrainSettings(**kw))
