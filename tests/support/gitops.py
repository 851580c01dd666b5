"""GitOps controllers as an API server sees them: Flux's kustomize-controller and Argo CD, request
for request, with the client-side work they do on what comes back.

* **Flux** (fluxcd/pkg ``ssa``, as kustomize-controller configures it): a GET of the live object; a
  dry-run apply (``dryRun=All&force=true&fieldManager=kustomize-controller``); the metadata
  cleanup, a JSON patch that removes kubectl's last-applied annotation and folds the entries of
  other managers (``kubectl*`` Apply and Update, ``before-first-apply``, its own Update) into its
  Apply entry, appended last; then, if the cleanup patched or the dry run drifted from the live
  object, the apply itself (``force=true``). A dry-run result without a resourceVersion means
  "created".
* **Argo CD** (gitops-engine, running kubectl's apply code in-process): sync = server-side apply
  as ``argocd-controller`` with ``force=true&fieldValidation=Strict``, followed by kubectl's own
  CSA→SSA migration (client-go ``csaupgrade``) when Update entries own the last-applied
  annotation; server-side diff = the same apply with ``dryRun=All``, whose response must carry an
  ``argocd-controller`` entry: only the fields it owns are taken from the predicted object, merged
  over the live one, and compared with it.

:class:`Api` is one endpoint serving VirtualClusters (vc-apiserver directly, through a host's
aggregator, or kube-apiserver serving the CRD), reached with plain HTTP so every query parameter
is exactly the one the controller sends.
"""

from __future__ import annotations

import copy
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hack.harness import binary

__all__ = ["APPLY", "ARGOCD", "FLUX", "JSON_PATCH", "LAST_APPLIED", "MERGE", "Api", "ArgoCD", "Diff",
           "KustomizeController", "Reconcile", "entries", "fields_to_paths", "paths_to_fields",
           "schema_misses", "sort_key"]

Obj = dict[str, Any]
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
GV = "/apis/kosmos.io/v1alpha1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
FLUX = "kustomize-controller"
ARGOCD = "argocd-controller"


@dataclass
class Api:
    """One endpoint serving ``virtualclusters.kosmos.io/v1alpha1``, as an admin reaches it."""

    name: str
    url: str
    ctx: ssl.SSLContext
    kubeconfig: Path
    kube_front: bool  # a kube-apiserver answers first: namespaces must exist there

    def send(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
             **query: str) -> tuple[int, Obj]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path + (f"?{qs}" if qs else ""), method=method, data=data,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def item(self, namespace: str, name: str) -> str:
        return f"{GV}/namespaces/{namespace}/virtualclusters/{name}"

    def create(self, obj: Obj, **query: str) -> tuple[int, Obj]:
        return self.send("POST", f"{GV}/namespaces/{obj['metadata']['namespace']}/virtualclusters", obj, **query)

    def get(self, namespace: str, name: str) -> Obj:
        code, obj = self.send("GET", self.item(namespace, name))
        assert code == 200, obj
        return obj

    def apply(self, manifest: Obj, manager: str, **query: str) -> tuple[int, Obj]:
        meta = manifest["metadata"]
        return self.send("PATCH", self.item(meta["namespace"], meta["name"]), manifest, APPLY,
                         fieldManager=manager, **query)

    def patch(self, namespace: str, name: str, body: Any, content_type: str = MERGE, **query: str) -> tuple[int, Obj]:
        return self.send("PATCH", self.item(namespace, name), body, content_type, **query)

    def openapi(self, wait: float = 60.0) -> Obj:
        """The group's OpenAPI v3 document, waiting out 404s (kube publishes a new CRD's, and a host
        an APIService's, a few seconds after it is served)."""
        deadline = time.monotonic() + wait
        while True:
            code, doc = self.send("GET", f"/openapi/v3{GV}")
            if code != 404 or time.monotonic() > deadline:
                assert code == 200, doc
                return doc
            time.sleep(0.5)

    def ensure_namespace(self, name: str) -> str:
        if self.kube_front:
            code, body = self.send("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": name}})
            assert code in (201, 409), body
        return name

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """The real kubectl against this endpoint."""
        proc = subprocess.run([binary("kubectl"), "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout


# -- managedFields as clients read them ----------------------------------------------------

def fields_to_paths(fields: Obj, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The set of paths a FieldsV1 trie encodes (``"."`` marks a node that is itself a member)."""
    out: set[tuple[str, ...]] = set()
    for key, child in fields.items():
        if key == ".":
            out.add(prefix)
        elif child:
            out |= fields_to_paths(child, prefix + (key,))
        else:
            out.add(prefix + (key,))
    return out


def paths_to_fields(paths: set[tuple[str, ...]]) -> Obj:
    """The FieldsV1 trie of a set of paths: the inverse of :func:`fields_to_paths`."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(key, {})
    for path in paths:
        node = root
        for key in path:
            node = node[key]
        if node and "." not in node:
            node["."] = {}
    return root


def union_fields(a: Obj | None, b: Obj | None) -> Obj:
    return paths_to_fields(fields_to_paths(a or {}) | fields_to_paths(b or {}))


def entries(obj: Obj) -> list[tuple[Any, ...]]:
    """An object's managedFields as two servers can agree on them: everything but the time's value
    (only whether there is one), as a sorted multiset (entries of different seconds sort by time,
    which two servers need not share)."""
    return sorted((e.get("manager", ""), e.get("operation", ""), e.get("apiVersion", ""), e.get("subresource", ""),
                   e.get("fieldsType", ""), json.dumps(e.get("fieldsV1"), sort_keys=True), "time" in e)
                  for e in obj.get("metadata", {}).get("managedFields", []))


def sort_key(entry: Obj) -> tuple[Any, ...]:
    """kube's order of managedFields (``sortEncodedManagedFields``): Apply before Update, then the
    time (none first; RFC 3339 seconds in UTC sort as text), manager, apiVersion, subresource."""
    return (entry.get("operation") != "Apply", entry.get("time", ""), entry.get("manager", ""),
            entry.get("apiVersion", ""), entry.get("subresource", ""))


def schema_misses(fields: Obj, document: Obj, kind: str) -> list[str]:
    """The paths of a FieldsV1 that name nothing in ``kind``'s schema of an OpenAPI v3 document, as
    structured-merge-diff reads them when it parses a managed set with that schema: ``f:`` a
    property (or a key of a map), ``k:`` an item of a keyed list (its keys the list's map keys),
    ``v:`` an item of a set, ``i:`` an index; ``$ref`` and ``allOf`` followed into components."""
    schemas = document["components"]["schemas"]

    def resolve(node: Obj) -> Obj:
        out = dict(node)
        for ref in [node.get("$ref")] + [n.get("$ref") for n in node.get("allOf", [])]:
            if ref:
                out = {**resolve(schemas[ref.rsplit("/", 1)[-1]]), **{k: v for k, v in out.items()
                                                                       if k not in ("$ref", "allOf")}}
        return out

    misses: list[str] = []

    def walk(node: Obj, trie: Obj, where: str) -> None:
        schema = resolve(node)
        for key, child in trie.items():
            if key == ".":
                continue
            kind_, _, text = key.partition(":")
            here = f"{where}/{key}"
            sub: Obj | None = None
            if kind_ == "f":
                if text in schema.get("properties", {}):
                    sub = schema["properties"][text]
                elif isinstance(schema.get("additionalProperties"), dict):
                    sub = schema["additionalProperties"]
                elif schema.get("x-kubernetes-preserve-unknown-fields"):
                    continue  # anything below is deduced
            elif kind_ == "k" and schema.get("x-kubernetes-list-type") == "map":
                keys = json.loads(text)
                if isinstance(keys, dict) and set(keys) <= set(schema.get("x-kubernetes-list-map-keys", [])):
                    sub = schema.get("items")
            elif kind_ == "v" and schema.get("x-kubernetes-list-type") == "set":
                json.loads(text)
                sub = schema.get("items")
            elif kind_ == "i" and schema.get("type") == "array" and text.isdigit():
                sub = schema.get("items")
            if sub is None:
                misses.append(here)
            elif child:
                walk(sub, child, here)

    walk(schemas[kind], fields, "")
    return misses


def _leaf_paths(paths: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    return {p for p in paths if not any(len(q) > len(p) and q[:len(p)] == p for q in paths)}


def _first(items: list[Obj], pred: Any) -> int:
    return next((i for i, e in enumerate(items) if pred(e)), -1)


def _changed(a: Any, b: Any, where: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for key in set(a) | set(b):
            out |= _changed(a.get(key), b.get(key), f"{where}.{key}")
        return out
    return set() if a == b else {where}


# -- Flux ----------------------------------------------------------------------------------

CLEANUP_MANAGERS = (("kubectl", "Apply"), ("kubectl", "Update"), ("before-first-apply", "Update"), (FLUX, "Update"))
CLEANUP_ANNOTATIONS = (LAST_APPLIED, "kustomize.toolkit.fluxcd.io/checksum", "fluxcd.io/sync-checksum")
CLEANUP_LABELS = ("fluxcd.io/sync-gc-mark",)


@dataclass
class Reconcile:
    """What one kustomize-controller reconcile of one object did, and what the server answered."""

    action: str  # created, configured, unchanged
    dry_run: tuple[int, Obj]
    cleanup: list[Obj] | None = None  # the JSON patch sent, if any
    cleaned: tuple[int, Obj] | None = None
    applied: tuple[int, Obj] | None = None


@dataclass
class KustomizeController:
    api: Api
    manager: str = FLUX

    def reconcile(self, manifest: Obj) -> Reconcile:
        """``ResourceManager.ApplyAll`` for one object, with kustomize-controller's options."""
        meta = manifest["metadata"]
        code, existing = self.api.send("GET", self.api.item(meta["namespace"], meta["name"]))
        existing = existing if code == 200 else {}
        dry = self.api.apply(manifest, self.manager, dryRun="All", force="true")
        assert dry[0] in (200, 201), dry
        out = Reconcile("", dry)
        out.cleanup = self.cleanup_patch(existing)
        if out.cleanup:
            out.cleaned = self.api.patch(meta["namespace"], meta["name"], out.cleanup, JSON_PATCH,
                                         fieldManager=self.manager)
            assert out.cleaned[0] == 200, out.cleaned
        if out.cleanup or self.drifted(existing, dry[1]):
            out.applied = self.api.apply(manifest, self.manager, force="true")
            assert out.applied[0] in (200, 201), out.applied
            out.action = "configured" if dry[1]["metadata"].get("resourceVersion") else "created"
        else:
            out.action = "unchanged"
        return out

    @staticmethod
    def drifted(existing: Obj, dry_run: Obj) -> bool:
        """``hasDrifted``: to be created, or labels, annotations or anything outside metadata and
        status differ (empty and absent maps are equal)."""
        if not dry_run["metadata"].get("resourceVersion"):
            return True
        for key in ("labels", "annotations"):
            if (dry_run["metadata"].get(key) or {}) != (existing.get("metadata", {}).get(key) or {}):
                return True

        def rest(obj: Obj) -> Obj:
            return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
        return rest(dry_run) != rest(existing)

    def cleanup_patch(self, existing: Obj) -> list[Obj] | None:
        """``cleanupMetadata``: remove the annotations and labels, then ``PatchReplaceFieldsManagers``:
        every matching entry (name prefix, operation, main resource) is folded into this manager's
        Apply entry (the first match renamed if there is none), which goes last."""
        if not existing:
            return None
        meta = existing["metadata"]
        patch: list[Obj] = []
        for key in CLEANUP_ANNOTATIONS:
            if key in (meta.get("annotations") or {}):
                patch.append({"op": "remove", "path": "/metadata/annotations/" + key.replace("/", "~1")})
        for key in CLEANUP_LABELS:
            if key in (meta.get("labels") or {}):
                patch.append({"op": "remove", "path": "/metadata/labels/" + key.replace("/", "~1")})
        current = meta.get("managedFields") or []
        mine: Obj | None = next((e for e in current if e["manager"] == self.manager and e["operation"] == "Apply"),
                                None)
        kept, edited = [], False
        for entry in current:
            if entry is mine:
                continue
            if any(entry["manager"].startswith(name) and entry["operation"] == op and not entry.get("subresource")
                   for name, op in CLEANUP_MANAGERS):
                if mine is None:
                    mine = {**entry, "manager": self.manager, "operation": "Apply"}
                else:
                    mine = {**mine, "fieldsV1": union_fields(mine.get("fieldsV1"), entry.get("fieldsV1"))}
                edited = True
                continue
            kept.append(entry)
        if edited:
            patch.append({"op": "replace", "path": "/metadata/managedFields", "value": [*kept, mine]})
        return patch or None


# -- Argo CD -----------------------------------------------------------------------------------

@dataclass
class Diff:
    """gitops-engine's server-side diff of one object: what it would look like after a sync (only
    the fields Argo CD owns taken from the dry run), and the paths where that differs from live."""

    dry_run: Obj
    predicted: Obj
    changed: set[str] = field(default_factory=set)

    @property
    def modified(self) -> bool:
        return bool(self.changed)


@dataclass
class ArgoCD:
    api: Api
    manager: str = ARGOCD

    def sync(self, manifest: Obj, dry_run: bool = False) -> tuple[int, Obj]:
        """kubectl's ``applyOneObject`` with Argo CD's options: the apply, then kubectl's migration of
        client-side-apply entries (any manager), and if it migrated, the apply once more."""
        query = {"force": "true", "fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
        applied = self.api.apply(manifest, self.manager, **query)
        if applied[0] not in (200, 201):
            return applied
        if self.migrate(manifest, applied[1], dry_run):
            applied = self.api.apply(manifest, self.manager, **query)
        return applied

    def migrate(self, manifest: Obj, obj: Obj, dry_run: bool) -> bool:
        """kubectl's ``migrateToSSAIfNecessary``: the migration patch, guarded by the resourceVersion
        it was made from; on a conflict the object is read again and the patch made anew (5 tries)."""
        meta = manifest["metadata"]
        for _ in range(5):
            patch = self.migration_patch(obj)
            if patch is None:
                return False
            code, answer = self.api.patch(meta["namespace"], meta["name"], patch, JSON_PATCH,
                                          fieldManager=self.manager, fieldValidation="Strict",
                                          **({"dryRun": "All"} if dry_run else {}))
            if code == 200:
                return True
            assert code == 409, answer
            obj = self.api.get(meta["namespace"], meta["name"])
        raise AssertionError(f"the migration of {meta['name']} conflicted 5 times")

    def migration_patch(self, obj: Obj) -> list[Obj] | None:
        """client-go's ``csaupgrade.UpgradeManagedFieldsPatch`` for the Update managers that own the
        last-applied annotation: each folded into this manager's Apply entry (the first of them
        renamed to it if there is none), then dropped; the resourceVersion replaced to guard the write."""
        current = obj["metadata"].get("managedFields") or []
        annotation = ("f:metadata", "f:annotations", "f:" + LAST_APPLIED)
        csa = sorted({e["manager"] for e in current if e["operation"] == "Update"
                      and annotation in fields_to_paths(e.get("fieldsV1") or {})})
        result = [dict(e) for e in current]
        for name in csa:
            def update_of(e: Obj, name: str = name) -> bool:
                return e["manager"] == name and e["operation"] == "Update" and not e.get("subresource")
            target = _first(result, lambda e: e["manager"] == self.manager and e["operation"] == "Apply"
                            and not e.get("subresource"))
            if target < 0:
                target = _first(result, update_of)
                if target < 0:
                    continue
                result[target] = {**result[target], "manager": self.manager, "operation": "Apply"}
            version = result[target].get("apiVersion")
            source = _first(result, lambda e, version=version: update_of(e) and e.get("apiVersion") == version)
            if source >= 0:
                result[target] = {**result[target], "fieldsV1": union_fields(result[target].get("fieldsV1"),
                                                                             result[source].get("fieldsV1"))}
            result = [e for e in result if not update_of(e)]
        if result == current:
            return None
        return [{"op": "replace", "path": "/metadata/managedFields", "value": result},
                {"op": "replace", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}]

    def diff(self, manifest: Obj, live: Obj) -> Diff:
        """``serverSideDiff`` with mutation webhooks removed (Argo CD's default): the dry-run sync's
        fields owned by this manager, over the live object; managedFields left out of both."""
        code, predicted = self.sync(manifest, dry_run=True)
        assert code in (200, 201), predicted
        owned: set[tuple[str, ...]] = set()
        for entry in predicted["metadata"].get("managedFields") or []:
            if entry["manager"] == self.manager:
                owned |= fields_to_paths(entry.get("fieldsV1") or {})
        assert owned, f"the dry run carries no managed fields of {self.manager}: {predicted['metadata']}"
        merged = copy.deepcopy(live)
        for path in _leaf_paths(owned):
            assert all(p.startswith("f:") for p in path), f"keyed or set items are not used here: {path}"
            keys = [p[2:] for p in path]
            source: Any = predicted
            for key in keys:
                source = source.get(key) if isinstance(source, dict) else None
            if source is None:
                continue
            target = merged
            for key in keys[:-1]:
                target = target.setdefault(key, {})
            target[keys[-1]] = copy.deepcopy(source)
        merged["metadata"].pop("managedFields", None)
        current = copy.deepcopy(live)
        current["metadata"].pop("managedFields", None)
        return Diff(predicted, merged, _changed(merged, current))
