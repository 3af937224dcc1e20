"""`partition: {by: <column>}` makes one client per distinct value of the column: with `clients`
left out the count follows from the data (docs/federated.md); a `clients` given that differs is
refused naming the field, the values and the number received. Checked before any Flower process
starts (pipeline.federated.silos.counted, FederatedSettings.counted)."""

from __future__ import annotations

import pytest

from baton.configs import build_config
from baton.errors import StageError
from baton.pipeline.stages.federated import Config
from baton.pipeline.testing import run_stage

ISLANDS = "['biscoe', 'dream', 'torgersen']"


def test_by_island_without_clients_counts_one_client_per_island(examples, tmp_path):
    from types import SimpleNamespace

    from baton.pipeline.federated.silos import counted

    config = build_config(Config, {"partition": {"by": "island"}, "min_clients": 3})
    assert config.by_data  # min_clients 3 is above the default 2 clients, and accepted here
    settled = counted(SimpleNamespace(inputs={"examples": examples}), config)
    assert settled.clients == 3 and settled.count == 3 and not settled.by_data
    assert settled.partition == config.partition and settled.min_clients == 3


def test_the_stage_checks_the_counted_clients_before_it_starts_a_federation(examples, tmp_path):
    # 3 islands: min_clients 4 is above them (the old code counted the default 2 clients here)
    with pytest.raises(StageError, match=r"min_clients \(4\) is above the number of clients "
                                         r"\(3\)"):
        run_stage("federated", {"partition": {"by": "island"}, "min_clients": 4},
                  {"examples": examples}, tmp_path / "1")


def test_clients_that_disagree_with_the_partition_are_refused_naming_the_field(examples,
                                                                               tmp_path):
    with pytest.raises(StageError) as info:
        run_stage("federated", {"clients": 2, "partition": {"by": "island"}},
                  {"examples": examples}, tmp_path / "2")
    message = str(info.value)
    assert message.startswith("federated.clients: partition.by 'island' makes one client per "
                              f"distinct value, 3 ({ISLANDS})"), message
    assert "leave clients out or give 3. Received: clients=2" in message


def test_a_cluster_needs_the_number_given_and_says_why():
    from baton.k8s.errors import ManifestError
    from baton.k8s.federated import Federation

    with pytest.raises(ManifestError) as info:
        Federation.from_config("fl", {"partition": {"by": "island"}})
    assert info.value.field == "stages.fl.config.clients"
    assert "partition.by's distinct values: give their number" in str(info.value)


def test_the_partition_setting_is_the_splits_own_class_checked_when_the_spec_is_read():
    from baton.errors import ConfigError
    from baton.pipeline.dataplane.partition import Partition

    config = build_config(Config, {"clients": 3, "partition": {"dirichlet": 0.5, "seed": 7}})
    assert isinstance(config.partition, Partition) and config.partition.describe() == \
        "dirichlet(0.5)"
    with pytest.raises(ConfigError, match=r"stages.fl.config.partition: partition takes exactly "
                                          r"one of .* Received: \['by', 'iid'\]"):
        build_config(Config, {"partition": {"by": "island", "iid": True}}, "stages.fl.config")
