"""kubectl vc reads kubectl's own flags wherever kubectl users put them: before the verb or after it."""

from __future__ import annotations

from apiservice.plugin import _parser


def test_host_flags_before_the_verb_are_not_reset_by_it() -> None:
    args = _parser().parse_args(["-n", "team", "--context", "host", "connect", "dev"])
    assert (args.namespace, args.context, args.kubeconfig, args.name) == ("team", "host", None, "dev")


def test_host_flags_after_the_verb_count_too() -> None:
    args = _parser().parse_args(["list", "-A", "--kubeconfig", "/tmp/k", "-n", "x"])
    assert (args.namespace, args.kubeconfig, args.all_namespaces) == ("x", "/tmp/k", True)
    assert _parser().parse_args(["credential", "dev"]).expiration_seconds == 900
