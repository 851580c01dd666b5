"""The tenant components' tuning profiles: what each adds to their flags and environment."""

from __future__ import annotations

import pytest

from apiserver.__main__ import parse_args
from reconciler.runtime.tuning import LEAN, PROFILES, STOCK


def test_lean_turns_off_the_watch_cache_and_storage_metric_polls_and_caps_go() -> None:
    assert LEAN.apiserver_flags() == ["--watch-cache=false", "--etcd-count-metric-poll-period=0",
                                      "--etcd-db-metric-poll-interval=0"]
    assert LEAN.env("kube-apiserver") == {"GOGC": "50", "GOMAXPROCS": "2"}
    for binary in ("etcd", "kube-controller-manager", "kube-scheduler"):
        assert LEAN.env(binary) == {"GOGC": "50", "GOMAXPROCS": "1"}, binary


def test_lean_gives_every_component_a_timer_slack_and_the_apiserver_the_shortest() -> None:
    others = [LEAN.timer_slack(b) for b in ("etcd", "kube-controller-manager", "kube-scheduler")]
    assert others == [50_000_000] * 3
    assert LEAN.timer_slack("kube-apiserver") == 20_000_000  # a longer one delayed its start (Ready)


def test_stock_keeps_kube_and_go_defaults() -> None:
    assert STOCK.apiserver_flags() == []
    assert STOCK.env("kube-apiserver") == {"GOGC": "100"}
    assert STOCK.timer_slack("kube-apiserver") == 0  # the spawning thread's: the kernel's default


def test_an_explicit_gc_target_overrides_the_profile_s_alone() -> None:
    tuned = LEAN.with_gogc(25)
    assert tuned.env("etcd") == {"GOGC": "25", "GOMAXPROCS": "1"}
    assert tuned.apiserver_flags() == LEAN.apiserver_flags()
    assert LEAN.with_gogc(None) is LEAN


def test_every_profile_is_a_choice_of_the_server_and_lean_is_the_default() -> None:
    required = ["--tls-cert-file", "tls.crt", "--tls-private-key-file", "tls.key", "--etcd-servers", "https://e:2379"]
    assert parse_args(required).tenant_tuning == LEAN.name
    for name in PROFILES:
        assert parse_args([*required, "--tenant-tuning", name]).tenant_tuning == name
    with pytest.raises(SystemExit):
        parse_args([*required, "--tenant-tuning", "fast"])
