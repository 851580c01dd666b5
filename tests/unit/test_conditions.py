"""Conditions by type (apiserver.apis.conditions): found and set as apimachinery's meta helpers do."""

from __future__ import annotations

import datetime as dt

from apiserver.apis.conditions import find_condition, is_true, set_condition, true_since

T0, T1 = "2024-01-02T03:04:05Z", "2024-01-02T03:05:00Z"


def test_a_condition_is_found_by_its_type_and_malformed_lists_read_as_empty() -> None:
    conditions = ["junk", {"type": "Ready", "status": "True"}, {"type": "NodesReady", "status": "False"}]
    assert find_condition(conditions, "NodesReady") == {"type": "NodesReady", "status": "False"}
    assert find_condition(conditions, "Missing") is None
    assert find_condition(None, "Ready") is None
    assert find_condition({"type": "Ready"}, "Ready") is None


def test_setting_a_new_condition_appends_it_with_the_time_given() -> None:
    assert set_condition([], "Ready", "False", "Pending", "not yet", 3, T0) == [
        {"type": "Ready", "status": "False", "reason": "Pending", "message": "not yet", "observedGeneration": 3,
         "lastTransitionTime": T0}]


def test_the_transition_time_moves_only_when_the_status_changes() -> None:
    first = set_condition([{"type": "Other", "status": "True"}], "Ready", "False", "Pending", "a", 1, T0)
    same_status = set_condition(first, "Ready", "False", "Starting", "b", 2, T1)
    assert same_status[1] == {"type": "Ready", "status": "False", "reason": "Starting", "message": "b",
                              "observedGeneration": 2, "lastTransitionTime": T0}
    flipped = set_condition(same_status, "Ready", "True", "Ready", "c", 2, T1)
    assert flipped[1]["lastTransitionTime"] == T1
    assert flipped[0] == {"type": "Other", "status": "True"}  # others are left as they are, in their place
    assert first[1]["reason"] == "Pending"  # the list given is not changed


def test_a_true_condition_says_since_when_and_any_other_says_nothing() -> None:
    assert true_since([{"type": "Ready", "status": "True", "lastTransitionTime": T0}], "Ready") == \
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert true_since([{"type": "Ready", "status": "False", "lastTransitionTime": T0}], "Ready") is None
    assert true_since([{"type": "Ready", "status": "True"}], "Ready") is None  # true, but not since when
    assert true_since([{"type": "Ready", "status": "True", "lastTransitionTime": "soon"}], "Ready") is None
    assert true_since([{"type": "Other", "status": "True", "lastTransitionTime": T0}], "Ready") is None
    assert true_since(None, "Ready") is None


def test_a_condition_is_true_only_when_it_is_there_and_says_true() -> None:
    assert is_true([{"type": "Ready", "status": "True"}], "Ready")
    assert not is_true([{"type": "Ready", "status": "False"}], "Ready")
    assert not is_true([{"type": "Ready", "status": "Unknown"}], "Ready")
    assert not is_true([{"type": "Other", "status": "True"}], "Ready")
    assert not is_true(None, "Ready")
