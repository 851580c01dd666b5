"""Startup as sample-apiserver has it: flags → options (validated together) → a frozen config → completed
with what depends on other flags and on where the process runs. Nothing here starts a server."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from apiserver.__main__ import RUNTIME_WITHOUT_KEY, Options, main, parser
from apiserver.server.config import HostAccess
from reconciler.options import AGENT_FILES_MISSING, AGENT_WITHOUT_HOST
from reconciler.runtime.pods import PodsRuntime
from reconciler.runtime.process import ProcessRuntime

REQUIRED = ["--tls-cert-file", "tls.crt", "--tls-private-key-file", "tls.key", "--etcd-servers", "https://e:2379"]
AGENT_FILES = ["--node-agent-ca-file", "ca.crt", "--node-agent-client-cert-file", "c.crt",
               "--node-agent-client-key-file", "c.key"]


def options(*flags: str) -> Options:
    return Options.parse([*REQUIRED, *flags])


# -- options --------------------------------------------------------------------------------------

def test_every_parsed_flag_lands_in_exactly_one_option_group() -> None:
    """No flag is parsed and then dropped, none is read by two groups."""
    dests = {a.dest for a in parser()._actions if a.dest != "help"}
    parsed = options()
    groups = [*(getattr(parsed.server, n) for n in parsed.server.GROUPS),
              *(getattr(parsed.reconciler, n) for n in parsed.reconciler.GROUPS), parsed.logs]
    names = [f.name for g in groups for f in dataclasses.fields(g)]
    assert sorted(names) == sorted(dests)


def test_every_group_s_flags_are_listed_in_a_section_of_their_own() -> None:
    titles = [g.title for g in parser()._action_groups]
    assert titles[2:] == ["Secure serving flags", "Etcd flags", "Authentication flags", "Authorization flags",
                          "Host cluster flags", "Limits flags", "Kubeconfig subresource flags", "Reconciler flags",
                          "Control-plane runtime flags", "Snapshot flags", "Node joiner flags", "Shared slice flags",
                          "Logs flags"]


def test_flags_that_agree_are_accepted() -> None:
    assert options().validate() == []
    assert options("--control-plane-runtime", "pods", "--encryption-key-file", "k", "--node-joiner", "agent",
                   *AGENT_FILES).validate() == []


def test_a_control_plane_runtime_without_an_encryption_key_is_refused() -> None:
    assert options("--control-plane-runtime", "process").validate() == [RUNTIME_WITHOUT_KEY]


def test_the_agent_joiner_needs_its_three_files_and_the_tenant_keys() -> None:
    assert options("--node-joiner", "agent", "--encryption-key-file", "k").validate() == [AGENT_FILES_MISSING]
    assert options("--node-joiner", "agent", *AGENT_FILES).validate() == [AGENT_WITHOUT_HOST]


def test_every_error_of_the_flags_is_reported_together_the_runtime_s_first() -> None:
    assert options("--control-plane-runtime", "pods", "--node-joiner", "agent").validate() == [
        RUNTIME_WITHOUT_KEY, AGENT_FILES_MISSING, AGENT_WITHOUT_HOST]


def test_the_reconciler_s_flags_are_not_judged_when_it_does_not_run_here() -> None:
    disabled = options("--enable-reconciler", "false", "--control-plane-runtime", "pods", "--node-joiner", "agent")
    assert disabled.validate() == []
    assert disabled.reconciler.config() is None


def test_invalid_flags_end_the_process_with_every_error_on_a_line_of_its_own() -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*REQUIRED, "--control-plane-runtime", "process", "--node-joiner", "agent"])
    assert exit_.value.code == "\n".join([RUNTIME_WITHOUT_KEY, AGENT_FILES_MISSING, AGENT_WITHOUT_HOST])


def test_verbosity_maps_to_warnings_info_and_debug() -> None:
    assert [options("-v", v).logs.level for v in ("0", "1", "2", "4")] == [
        logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG]


# -- config ---------------------------------------------------------------------------------------

def test_the_config_is_frozen() -> None:
    config = options().config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.serving = config.serving  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.complete(in_cluster=False).authorization_mode = "AlwaysAllow"  # type: ignore[misc]


def test_comma_separated_flags_become_tuples_and_absent_ones_are_left_to_the_host() -> None:
    config = options("--etcd-servers", "https://a:2379, ,https://b:2379", "--requestheader-allowed-names",
                     "front-proxy-client,", "--enable-http2", "false").config()
    assert config.etcd.servers == ("https://a:2379", "https://b:2379")
    assert config.authentication.requestheader_allowed_names == ("front-proxy-client",)
    assert config.authentication.requestheader_username_headers is None  # the host's ConfigMap decides
    assert config.serving.http2 is False


def test_the_kubeconfig_subresource_is_told_how_long_the_configured_runtime_takes_to_wake() -> None:
    assert options().config().kubeconfig.wake_estimate == ProcessRuntime.WAKE_ESTIMATE
    assert options("--control-plane-runtime", "pods").config().kubeconfig.wake_estimate == PodsRuntime.WAKE_ESTIMATE


# -- complete -------------------------------------------------------------------------------------

def test_without_a_host_nothing_is_delegated_and_authorization_is_standalone() -> None:
    completed = options().config().complete(in_cluster=False)
    assert (completed.authentication_host, completed.authorization_host, completed.host_access) == (None, None, None)
    assert completed.authorization_mode == "Standalone"


def test_in_a_cluster_every_host_client_is_the_service_account_s_and_authorization_is_delegated() -> None:
    completed = options().config().complete(in_cluster=True)
    assert completed.authentication_host == completed.authorization_host == completed.host_access == HostAccess()
    assert completed.authorization_mode == "Delegated"


def test_authorization_and_the_host_default_to_the_authentication_kubeconfig() -> None:
    completed = options("--authentication-kubeconfig", "authn").config().complete(in_cluster=False)
    assert completed.authorization_host == completed.host_access == HostAccess("authn")
    assert completed.authorization_mode == "Delegated"


def test_kubeconfigs_and_a_mode_given_by_flag_win_over_the_defaults() -> None:
    completed = options("--authentication-kubeconfig", "authn", "--authorization-kubeconfig", "authz",
                        "--host-kubeconfig", "host", "--authorization-mode", "AlwaysAllow").config().complete(
        in_cluster=True)
    assert (completed.authentication_host, completed.authorization_host, completed.host_access) == (
        HostAccess("authn"), HostAccess("authz"), HostAccess("host"))
    assert completed.authorization_mode == "AlwaysAllow"


def test_a_completed_config_keeps_everything_the_config_said() -> None:
    config = options("--secure-port", "7443", "--watch-cache-history", "50").config()
    completed = config.complete(in_cluster=False)
    assert all(getattr(completed, f.name) == getattr(config, f.name) for f in dataclasses.fields(config))
