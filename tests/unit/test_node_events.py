"""The promoter's events: one per pass for the nodes claimed or returned together."""

from __future__ import annotations

from reconciler.nodes.promoter import nodes_message


def test_an_event_of_several_nodes_names_the_first_ten_by_name_and_counts_the_rest() -> None:
    names = [f"node-{i:02d}" for i in range(12, 0, -1)]
    assert nodes_message("claimed", names) == (
        "claimed 12 host node(s): " + ", ".join(f"node-{i:02d}" for i in range(1, 11)) + " and 2 more")
    assert nodes_message("returned", ["b", "a"]) == "returned 2 host node(s): a, b"
