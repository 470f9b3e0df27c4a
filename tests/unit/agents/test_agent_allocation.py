"""Pure GPU and port placement."""

from __future__ import annotations

import pytest

from agents import allocation

POOL = allocation.NodeSet("l4x4", gpus_per_node=4, nodes=("n1", "n2"))


def hold(rid, node, gpus, port=31000):
    return allocation.Holding(rid, "l4x4", node, tuple(gpus), port)


def test_best_fit_packs_partly_used_nodes():
    """A replica goes on the node with the fewest free GPUs that still fits it, leaving whole nodes free."""
    holdings = [hold("a", "n2", [0, 1])]
    assert allocation.choose_gpus(POOL, holdings, 2) == ("n2", (2, 3))
    assert allocation.choose_gpus(POOL, holdings, 3) == ("n1", (0, 1, 2))


def test_refusal_reasons_name_the_shortfall():
    """When nothing fits, the answer is a reason naming the pool and the free GPUs."""
    holdings = [hold("a", "n1", [0, 1, 2]), hold("b", "n2", [0, 1, 2])]
    reason = allocation.choose_gpus(POOL, holdings, 2)
    assert isinstance(reason, str) and "not enough free GPUs in pool l4x4" in reason and "2 free" in reason
    assert "per node" in allocation.choose_gpus(POOL, [], 8)
    assert "gpu_count must be >= 1" in allocation.choose_gpus(POOL, [], 0)


def test_nodes_under_notice_are_avoided():
    """A node being preempted receives no new replica."""
    assert allocation.choose_gpus(POOL, [], 4, avoid_nodes=["n1"]) == ("n2", (0, 1, 2, 3))
    assert isinstance(allocation.choose_gpus(POOL, [], 4, avoid_nodes=["n1", "n2"]), str)


def test_free_and_idle_counts_ignore_other_pools():
    """Holdings of another pool, or of nodes that left, do not count against this pool."""
    holdings = [hold("a", "n1", [0]), allocation.Holding("x", "other", "n1", (1,), 1), hold("gone", "n9", [0])]
    assert allocation.gpus_free(POOL, holdings) == 7
    assert allocation.idle_nodes(POOL, holdings) == ["n2"]


def test_port_choice_skips_used_and_busy_ports():
    """The lowest port neither held by a replica nor bound on the host is chosen; None when the range is full."""
    assert allocation.choose_port((31000, 31003), {31000}, lambda p: p != 31001) == 31002
    assert allocation.choose_port((31000, 31001), {31000, 31001}, lambda p: True) is None


@pytest.mark.parametrize("text", ["80-90", "2000-1000", "1024-70000"])
def test_bad_port_ranges_are_refused(text):
    """Port ranges outside 1024-65535 or reversed are refused."""
    with pytest.raises(ValueError, match="port range"):
        allocation.parse_port_range(text)
