"""The steps of a rotation that need no server: which CAs a tenant apiserver trusts and which keys verify
at each phase, what a renewal keeps of a rotation under way, when the reconciler may take the next step,
and which requests admission refuses."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509

from apiserver.apis.rotation import request_errors
from apiserver.apis.virtualcluster import VirtualCluster
from certs import pki, rotation
from certs import tenant as tenantpki
from certs.rotation import CLIENT_CA, SERVICE_ACCOUNT_KEY
from certs.tenant import TenantPki
from reconciler.controlplane.rotation import Rotations

START = "2026-11-28T10:00:00Z"


@pytest.fixture(scope="module")
def fresh() -> TenantPki:
    return tenantpki.generate(["127.0.0.1"])


def subjects(bundle: bytes) -> list[str]:
    return [c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(bundle)]


def public_keys(files: dict[str, bytes] | TenantPki) -> int:
    data = files.files if isinstance(files, TenantPki) else files
    return data["sa.pub"].count(b"BEGIN PUBLIC KEY")


def test_users_credentials_are_signed_by_a_client_ca_of_their_own_which_the_apiserver_trusts_beside_the_cluster_ca(
        fresh: TenantPki) -> None:
    user = fresh.mint_user("alice", ("kosmos:tenant-admins",), dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    user.cert.verify_directly_issued_by(fresh.cert("client-ca"))
    assert subjects(fresh.files["client-ca-bundle.crt"]) == ["CN=kubernetes", "CN=kubernetes-client-ca"]
    assert fresh.issuer() != tenantpki.TenantPki({**fresh.files, "client-ca.crt": fresh.files["ca.crt"]}).issuer()


def test_a_client_ca_rotation_trusts_both_until_complete_and_signs_with_the_new_one_once_prepared(
        fresh: TenantPki) -> None:
    old = fresh.cert("client-ca")
    started = rotation.start(fresh.files, CLIENT_CA, START, START)
    assert rotation.state_of(started, CLIENT_CA).phase == "Preparing"
    assert started["client-ca.crt"] == fresh.files["client-ca.crt"]  # the old one still signs
    assert len(subjects(started["client-ca-bundle.crt"])) == 3
    prepared = rotation.sign(started, CLIENT_CA, START)
    assert rotation.state_of(prepared, CLIENT_CA).phase == "Prepared"
    assert prepared["client-ca.crt"] == started["client-ca-next.crt"] and "client-ca-next.crt" not in prepared
    assert len(subjects(prepared["client-ca-bundle.crt"])) == 3
    completing = rotation.complete(prepared, CLIENT_CA, START)
    bundle = x509.load_pem_x509_certificates(completing["client-ca-bundle.crt"])
    assert old not in bundle and len(bundle) == 2  # the cluster CA and the new client CA
    finished = rotation.finish(completing, CLIENT_CA, START)
    assert rotation.state_of(finished, CLIENT_CA).phase == "Completed"
    assert not {"client-ca-previous.crt", "client-ca-previous.key"} & set(finished)


def test_a_service_account_key_rotation_verifies_both_keys_from_start_to_the_end_of_the_overlap(
        fresh: TenantPki) -> None:
    started = rotation.start(fresh.files, SERVICE_ACCOUNT_KEY, START, START)
    assert started["sa.key"] == fresh.files["sa.key"] and public_keys(started) == 2
    signing = rotation.sign(started, SERVICE_ACCOUNT_KEY, START)
    assert signing["sa.key"] == started["sa-next.key"] and public_keys(signing) == 2
    assert rotation.state_of(signing, SERVICE_ACCOUNT_KEY).step == "sign"
    prepared = rotation.prepared(signing, SERVICE_ACCOUNT_KEY, START)
    waiting = rotation.complete(prepared, SERVICE_ACCOUNT_KEY, START)
    assert public_keys(waiting) == 2  # the overlap: live tokens of the old key still verify
    dropped = rotation.drop(waiting)
    assert public_keys(dropped) == 1 and dropped["sa.pub"] == pki.public_key_pem(pki.load_key(signing["sa.key"]))


def test_a_renewal_in_the_middle_of_a_rotation_keeps_its_keys_and_where_it_stands(fresh: TenantPki) -> None:
    started = TenantPki(rotation.start(fresh.files, SERVICE_ACCOUNT_KEY, START, START))
    renewed = tenantpki.generate(["127.0.0.1", "10.0.0.9"], started)
    assert renewed.files["sa-next.key"] == started.files["sa-next.key"]
    assert renewed.files["sa.pub"] == started.files["sa.pub"]
    assert rotation.state_of(renewed.files, SERVICE_ACCOUNT_KEY) == rotation.state_of(started.files,
                                                                                      SERVICE_ACCOUNT_KEY)
    assert "10.0.0.9" in renewed.sans()


def test_a_pki_from_before_client_cas_asks_for_renewal_and_gets_one(fresh: TenantPki) -> None:
    legacy = TenantPki({k: v for k, v in fresh.files.items() if not k.startswith("client-ca")})
    assert legacy.needs_renewal()
    renewed = tenantpki.generate(["127.0.0.1"], legacy)
    assert "client-ca.crt" in renewed.files and renewed.files["ca.crt"] == fresh.files["ca.crt"]


def cluster(annotations: dict[str, str]) -> VirtualCluster:
    return VirtualCluster({"metadata": {"name": "dev", "namespace": "ns", "annotations": annotations}, "spec": {}})


async def test_a_service_account_key_rotation_takes_each_step_only_once_the_last_is_in_force(
        fresh: TenantPki) -> None:
    rotations = Rotations(overlap=3600)
    asked = cluster({"kosmos.io/service-account-key-rotation-start": START})
    step = await rotations.advance(asked, fresh, "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and step.reason == "RotationStarted"
    started = TenantPki(step.files)
    assert await rotations.advance(asked, started, "https://127.0.0.1:1", rolled_out=False) is None
    step = await rotations.advance(asked, started, "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and rotation.state_of(step.files, SERVICE_ACCOUNT_KEY).step == "sign"
    step = await rotations.advance(asked, TenantPki(step.files), "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and step.reason == "RotationPrepared"
    prepared = TenantPki(step.files)
    assert await rotations.advance(asked, prepared, "https://127.0.0.1:1", rolled_out=True) is None  # no complete
    earlier = cluster({**asked.meta.annotations, "kosmos.io/service-account-key-rotation-complete": "2026-11-28T09:00:00Z"})
    assert await rotations.advance(earlier, prepared, "https://127.0.0.1:1", rolled_out=True) is None
    done = cluster({**asked.meta.annotations, "kosmos.io/service-account-key-rotation-complete": "2026-11-28T11:00:00Z"})
    step = await rotations.advance(done, prepared, "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and step.reason == "RotationCompleting"
    waiting = TenantPki(step.files)
    assert await rotations.advance(done, waiting, "https://127.0.0.1:1", rolled_out=True) is None  # the overlap
    assert 3500 < (rotations.next_in(waiting) or 0) <= 3600
    step = await Rotations(overlap=0).advance(done, waiting, "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and public_keys(step.files) == 1
    step = await rotations.advance(done, TenantPki(step.files), "https://127.0.0.1:1", rolled_out=True)
    assert step is not None and step.reason == "RotationCompleted"
    # the same request never starts a second rotation; a new time does
    assert await rotations.advance(done, TenantPki(step.files), "https://127.0.0.1:1", rolled_out=True) is None


async def test_on_a_runtime_with_one_apiserver_at_a_time_the_new_key_signs_from_the_start(fresh: TenantPki) -> None:
    asked = cluster({"kosmos.io/service-account-key-rotation-start": START})
    step = await Rotations().advance(asked, fresh, "https://127.0.0.1:1", rolled_out=True, in_place=True)
    assert step is not None and rotation.state_of(step.files, SERVICE_ACCOUNT_KEY).step == "sign"
    assert step.files["sa.key"] != fresh.files["sa.key"] and public_keys(step.files) == 2


def test_admission_refuses_a_request_that_is_not_a_time_and_any_of_an_imported_cluster() -> None:
    bad = request_errors({"metadata": {"annotations": {"kosmos.io/client-ca-rotation-start": "now"}}})
    assert [(c.type, c.field) for c in bad] == [("FieldValueInvalid",
                                                  "metadata.annotations[kosmos.io/client-ca-rotation-start]")]
    assert request_errors({"metadata": {"annotations": {"kosmos.io/client-ca-rotation-start": START}}}) == []
    imported = request_errors({"metadata": {"annotations": {"kosmos.io/service-account-key-rotation-start": START}},
                               "spec": {"import": {"kubeconfigSecretRef": {"name": "k"}}}})
    assert [c.type for c in imported] == ["FieldValueForbidden"]


def test_only_a_rotation_under_way_or_asked_for_anew_makes_the_reconciler_look_at_the_runtime(
        fresh: TenantPki) -> None:
    rotations = Rotations()
    asked = cluster({"kosmos.io/client-ca-rotation-start": START})
    assert not rotations.asked(cluster({}), fresh)
    assert rotations.pending(asked, fresh)
    started = TenantPki(rotation.start(fresh.files, CLIENT_CA, START, START))
    assert rotations.pending(asked, started)
    done = TenantPki(rotation.finish(rotation.complete(rotation.sign(started.files, CLIENT_CA, START), CLIENT_CA,
                                                       START), CLIENT_CA, START))
    assert rotations.asked(asked, done) and not rotations.pending(asked, done)
    assert rotations.progress(done).status == {"rotation": {"clientCA": {
        "phase": "Completed", "lastInitiationTime": START, "lastInitiationFinishedTime": START,
        "lastCompletionTime": START}}}
    assert rotations.pending(cluster({"kosmos.io/client-ca-rotation-start": "2026-11-29T00:00:00Z"}), done)
