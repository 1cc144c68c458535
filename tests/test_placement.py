"""Placement keys: which Ray resource each actor asks for, and the one-line error for a node the cluster lacks."""

import pytest
from pydantic import ValidationError

from rl.config import PlacementConfig, load_config
from rl.inputs.preflight import BadInput
from rl.loop.placement import (
    SLIVER,
    actor_options,
    check,
    check_capacity,
    node_resources,
    on_live_nodes,
    resource_of,
)

CLUSTER = {"CPU": 6.0, "node:127.0.0.2": 1.0, "node:127.0.0.3": 1.0, "node:__internal_head__": 1.0, "gpu_box": 1.0}


def test_an_address_names_the_nodes_own_resource_and_anything_else_a_custom_one():
    assert resource_of("127.0.0.3") == "node:127.0.0.3"
    assert resource_of("fd00::5") == "node:fd00::5"
    assert resource_of("gpu_box") == "gpu_box"


def test_actors_go_round_the_entries_and_anywhere_without_them():
    assert node_resources(["127.0.0.3", "gpu_box"], 3) == ["node:127.0.0.3", "gpu_box", "node:127.0.0.3"]
    assert node_resources([], 2) == [None, None]
    assert actor_options("gpu_box") == {"resources": {"gpu_box": SLIVER}}
    assert actor_options(None) == {}


def test_an_entry_no_node_has_is_one_line_naming_the_nodes():
    check(PlacementConfig(trainer_nodes=["127.0.0.3"], rollout_nodes=["gpu_box"]), CLUSTER)
    with pytest.raises(BadInput) as e:
        check(PlacementConfig(rollout_nodes=["127.0.0.9"]), CLUSTER)
    assert str(e.value).startswith("placement.rollout_nodes: no Ray node is '127.0.0.9' (node addresses: 127.0.0.2, ")
    assert "__internal_head__" not in str(e.value) and "\n" not in str(e.value)


def test_recipe_keys_and_an_empty_entry():
    cfg = load_config(None, ["placement.trainer_nodes=[127.0.0.3]", "placement.rollout_nodes=[tailor_node_2]"])
    assert cfg.placement.trainer_nodes == ["127.0.0.3"] and cfg.placement.rollout_nodes == ["tailor_node_2"]
    with pytest.raises(ValidationError, match="trainer_nodes holds an empty entry"):
        PlacementConfig(trainer_nodes=[" "])


def test_a_replacement_for_an_actor_on_a_lost_node_goes_anywhere():
    alive = {"node:127.0.0.2": 1.0, "gpu_box": 1.0}  # 127.0.0.3 was lost
    assert on_live_nodes(["node:127.0.0.3", "gpu_box", None], alive) == [None, "gpu_box", None]


def test_actors_no_node_could_ever_hold_are_refused_at_once_and_those_that_fit_are_not():
    """Two 1-CPU trainer ranks on a node started with 1 CPU waited 120 s for room that could never come, then
    stopped the run with a traceback; now that is one line at once, counting every actor placed there (and, for
    the whole cluster, every actor). Room that exists, even if busy now, is waited for."""
    head = {"CPU": 1.0, "node:127.0.0.2": 1.0}
    worker = {"CPU": 1.0, "GPU": 1.0, "node:127.0.0.3": 1.0, "gpu_box": 1.0}
    cpu = {"CPU": 1.0}
    ranks_on_worker = [("trainer rank", "node:127.0.0.3", cpu)] * 2
    worker_full = r"^the run needs 2 CPU\(s\) on the node\(s\) with 127.0.0.3 \(2 trainer ranks\), which offer 1"
    with pytest.raises(BadInput, match=worker_full):
        check_capacity(ranks_on_worker, [head, worker])
    one_each = [("rollout engine", "node:127.0.0.2", cpu), ("trainer rank", "node:127.0.0.3", cpu)]
    check_capacity(one_each, [head, worker])  # fits
    check_capacity([("rollout engine", None, cpu), ("trainer rank", None, cpu)], [head, worker])  # 2 CPUs in all
    three = [("rollout engine", None, cpu), ranks_on_worker[0], ("trainer rank", None, cpu)]
    with pytest.raises(BadInput, match=r"3 CPU\(s\) on the cluster.s nodes \(1 rollout engine, 2 trainer ranks\)"):
        check_capacity(three, [head, worker])
    gpu = {"CPU": 0.5, "GPU": 1.0}
    with pytest.raises(BadInput, match=r"needs 2 GPU\(s\) on the node\(s\) with gpu_box \(2 trainer ranks\), which"):
        check_capacity([("trainer rank", "gpu_box", gpu)] * 2, [head, worker, {"CPU": 4.0}])
    ninths = [("rollout engine", None, {"CPU": 1.0, "GPU": 1 / 9})] * 9  # one GPU shared nine ways: 1.0000000000000002
    check_capacity(ninths, [{"CPU": 9.0, "GPU": 1.0}])
