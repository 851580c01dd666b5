"""How the serving flags read: what kube's defaults are, and what is refused before anything starts."""

from __future__ import annotations

import pytest

from apiserver.__main__ import parse_args

REQUIRED = ["--tls-cert-file", "tls.crt", "--tls-private-key-file", "tls.key", "--etcd-servers", "https://e:2379"]


def test_idle_connections_close_after_kubes_90_seconds_unless_told_otherwise() -> None:
    assert parse_args(REQUIRED).idle_connection_timeout == 90.0
    assert parse_args([*REQUIRED, "--idle-connection-timeout", "2.5"]).idle_connection_timeout == 2.5


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_an_idle_timeout_that_is_not_a_positive_number_of_seconds_is_refused(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, "--idle-connection-timeout", value])
    assert "not a positive number of seconds" in capsys.readouterr().err
