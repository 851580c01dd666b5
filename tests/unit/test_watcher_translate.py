"""What a watcher sees of an event: a watcher without a selector sees exactly what one whose selector
matches everything sees, across namespaces and every kind of change."""

from __future__ import annotations

import itertools

import pytest

from apiserver.storage.cacher import Watcher
from apiserver.storage.interface import ADDED, BOOKMARK, DELETED, MODIFIED, Entry, Event, match_all


def entry(namespace: str, name: str, rv: int) -> Entry:
    return Entry.of(f"/registry/x/{namespace}/{name}", namespace, name, rv,
                    {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}})


def events() -> list[Event]:
    out = [Event(BOOKMARK, 9, None)]
    for namespace in ("a", "b"):
        old, new = entry(namespace, "x", 1), entry(namespace, "x", 2)
        out += [Event(ADDED, 2, new), Event(MODIFIED, 2, new, old), Event(MODIFIED, 2, new),
                Event(DELETED, 2, new, old), Event(DELETED, 2, old)]
    return out


@pytest.mark.parametrize(("namespace", "event"), list(itertools.product([None, "a", "b"], events())))
def test_a_watcher_without_a_selector_sees_what_one_matching_everything_sees(namespace: str | None,
                                                                            event: Event) -> None:
    unselective = Watcher(namespace, match_all, False, 10)
    everything = Watcher(namespace, lambda _: True, False, 10)

    seen, expected = unselective.translate(event), everything.translate(event)

    assert (seen is None) == (expected is None)
    if seen is not None and expected is not None:
        assert (seen.type, seen.rv, seen.entry, seen.prev) == (expected.type, expected.rv, expected.entry,
                                                               expected.prev)


def test_a_change_a_watcher_sees_as_is_is_handed_on_as_the_same_event() -> None:
    """The dispatch hands one event to every watcher; one seen unchanged is not copied per watcher."""
    event = Event(MODIFIED, 2, entry("a", "x", 2), entry("a", "x", 1))

    assert Watcher(None, match_all, False, 10).translate(event) is event
    assert Watcher("a", match_all, False, 10).translate(event) is event
    assert Watcher("b", match_all, False, 10).translate(event) is None


def test_an_object_leaving_a_selector_leaves_every_such_watcher_as_one_deleted_event() -> None:
    """Its last state is copied once per event, not once per watcher; the next event gets its own."""
    labelled = Entry.of("/registry/x/a/x", "a", "x", 1, {"metadata": {"name": "x", "namespace": "a",
                                                                      "labels": {"tier": "one"}}})
    event = Event(MODIFIED, 2, entry("a", "x", 2), labelled)
    watchers = [Watcher(None, lambda e: e.labels.get("tier") == "one", False, 10) for _ in range(3)]

    seen = [w.translate(event) for w in watchers]
    again = watchers[0].translate(Event(MODIFIED, 3, entry("a", "x", 3), labelled))

    assert seen[0] is not None and seen[0].type == DELETED
    assert seen[0].entry is not None and (seen[0].rv, seen[0].entry.rv) == (2, 2)
    assert seen[0].entry.obj["metadata"]["labels"] == {"tier": "one"}
    assert seen[1] is seen[0] and seen[2] is seen[0]
    assert again is not None and again is not seen[0] and again.rv == 3
