"""The conformance harness's pure parts: the focus it hands the suite, the JUnit it reads back, the
report it writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hack import conformance
from hack.conformance import SKIPS, SMOKE, Results, focus_of, go_regex, report

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1">
  <testsuite name="Kubernetes e2e suite" tests="4" failures="1" skipped="2">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" status="passed" time="4.2"></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" status="failed" time="125">
      <failure message="service is not reachable within 2m0s timeout on endpoint endpoint-test2:80 over TCP protocol" type="failed">[FAILED] service is not reachable within 2m0s timeout on endpoint endpoint-test2:80 over TCP protocol
In [It] at: k8s.io/kubernetes@v1.35.4/test/e2e/network/service.go:768</failure>
    </testcase>
    <testcase name="[It] [sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] CSI Mock volume attach should not require VolumeAttach" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>
"""


def test_the_focus_matches_each_smoke_test_literally_and_nothing_near_it() -> None:
    focus = re.compile(focus_of(SMOKE))

    assert all(focus.fullmatch(name) for name in SMOKE)
    assert not focus.search("[sig-node] Pods should get a host IPv6 [Conformance]")
    assert "\\ " not in focus_of(SMOKE)  # RE2 refuses an escaped space


def test_go_regex_escapes_only_what_go_reads_as_syntax() -> None:
    assert go_regex("a (b) [c].d") == r"a \(b\) \[c\]\.d"


def test_junit_results_count_conformance_tests_only_and_keep_each_failures_cause(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)

    results = Results.read("dedicated", tmp_path / "junit.xml")

    assert (results.count("passed"), results.count("failed"), results.count("skipped")) == (1, 1, 1)
    assert results.count("failed", "sig-network") == 1
    (failure,) = results.failed()
    assert failure.name == "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
    assert failure.cause == ("service is not reachable within 2m0s timeout on endpoint endpoint-test2:80 "
                             "over TCP protocol")


def test_the_report_puts_targets_side_by_side_with_their_failures_and_skips(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    host = Results.read("host", tmp_path / "junit.xml")
    host.cases = [c for c in host.cases if c.status != "failed"]
    dedicated = Results.read("dedicated", tmp_path / "junit.xml")

    text = report([host, dedicated])

    assert "| SIG | host passed / failed / skipped | dedicated passed / failed / skipped |" in text
    assert "| sig-network | 0 / 0 / 0 | 0 / 1 / 0 |" in text
    assert "| **all** | **1 / 0 / 1** | **1 / 1 / 1** |" in text
    assert f"`{SKIPS[0][0]}`: {SKIPS[0][1]}" in text
    host_failures = text.split("## Failures on host")[1].split("## Failures on dedicated")[0]
    assert "- (none)" in host_failures
    assert "- [sig-network] Services should serve a basic endpoint from pods [Conformance]: service is not reachable" \
        in text.split("## Failures on dedicated")[1]


def junit(**cases: str) -> str:
    """A JUnit file of ``name=status`` (passed, failed or skipped)."""
    body = {"passed": "", "failed": '<failure message="broke">broke</failure>', "skipped": '<skipped message="s"/>'}
    rows = "".join(f'<testcase name="[It] {name}" time="1">{body[status]}</testcase>' for name, status in cases.items())
    return f'<testsuites><testsuite name="Kubernetes e2e suite">{rows}</testsuite></testsuites>'


def test_each_failed_rerun_replaces_what_it_ran_and_a_slices_by_design_case_is_a_skip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "OUT", tmp_path)
    a, b, c = (f"[sig-node] {x} [Conformance]" for x in "abc")
    by_design = "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]"
    assert by_design in conformance.SLICE_BY_DESIGN
    runs = {"": {a: "passed", b: "failed", c: "failed", by_design: "failed"},
            "rerun-1": {b: "passed", c: "failed"}, "rerun-2": {c: "passed", b: "skipped"}}
    for where, cases in runs.items():
        (tmp_path / "slice" / where).mkdir(parents=True, exist_ok=True)
        (tmp_path / "slice" / where / "junit.xml").write_text(junit(**cases))
    results = conformance.load("slice")
    assert results is not None
    assert {x.name: x.status for x in results.cases} == {a: "passed", b: "passed", c: "passed", by_design: "skipped"}
    assert results.rerun == sorted([b, c]) and results.failed() == []
