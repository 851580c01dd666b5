"""The VirtualCluster schema: the single declaration behind request validation and OpenAPI.

Every field of ``virtualclusters.kosmos.io/v1alpha1`` is declared once here, with the field kinds of
:mod:`apiserver.machinery.fields` (each carries its description, JSON type, whether it is required,
and its value rules). From that declaration:

* :func:`validate_spec` / :func:`validate_status` load the body through marshmallow and turn the
  error tree into Kubernetes ``StatusCause``\\ s (``spec.promotePolicies[0].nodeCount``,
  ``FieldValueInvalid``, ``Invalid value: -1: spec.promotePolicies[0].nodeCount in body should be greater than
  or equal to 0``, worded as a CRD's schema validation words it);
* :func:`unknown_fields` lists the paths a strict decoder would reject, :func:`prune_unknown_fields`
  drops them;
* :mod:`apiserver.endpoints.openapi` walks the same fields to publish OpenAPI v2 and v3.

Field names are the JSON names (camelCase) so that the error tree, the unknown-field walk and the
OpenAPI properties all speak the wire vocabulary without a mapping.
"""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, validates_schema

from apiserver.apis import kubeversion
from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.apis.sharedslice import DEFAULT_MODE, RESOURCES_MODES
from apiserver.machinery import cron
from apiserver.machinery.errors import FIELD_VALUE_FORBIDDEN, Cause
from apiserver.machinery.fields import (
    FIELDS_V1_REF,
    LIST_MAP_KEYS,
    LIST_TYPE,
    META,
    Array,
    Bool,
    Check,
    Duration,
    FreeObject,
    Int,
    KubeSchema,
    Map,
    Obj,
    OneOf,
    Problem,
    Quantity,
    Range,
    Str,
    Time,
    Unique,
    check_label_map,
    cidr_errors,
    host_errors,
    optional_host_errors,
    optional_subdomain_errors,
    prune,
    qualified_name_errors,
    unknown_in,
    validate_with,
)
from apiserver.machinery.selectors import label_value_errors
from apiserver.machinery.validation import (
    SELECTOR_OPERATORS,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    selector_values_error,
)

DEFINITION_PREFIX = "io.kosmos.v1alpha1"

PHASES = ("Pending", "Preparing", "Initialized", "Completed", "Updating", "Upgrading", "Hibernating", "Hibernated",
          "Waking", "Deleting")
UPGRADE_STATES = ("InProgress", "Succeeded", "RolledBack")
BACKUP_REASONS = ("Scheduled", "PreUpgrade")
NODE_PHASES = ("Claimed", "Joining", "Ready", "Releasing", "NotReady")
CONDITION_STATUSES = ("True", "False", "Unknown")
SERVICE_TYPES = ("nodePort", "hostNetwork")


def _api_version() -> Str:
    return Str("APIVersion defines the versioned schema of this representation of an object. Servers "
               "convert recognized schemas to the latest internal value and may reject unrecognized values.")


def _kind() -> Str:
    return Str("Kind is a string value representing the REST resource this object represents, in "
               "CamelCase. Servers may infer it from the endpoint the client submits requests to.")


class LabelSelectorRequirementSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.LabelSelectorRequirement"
    DESCRIPTION = ("A label selector requirement is a selector that contains values, a key, and an operator "
                   "that relates the key and values.")

    key = Str("The label key that the selector applies to.", required=True, validate=Check(qualified_name_errors))
    operator = Str("The key's relationship to a set of values: In, NotIn, Exists or DoesNotExist.",
                   required=True, validate=OneOf(SELECTOR_OPERATORS))
    values = Array(Str(validate=Check(label_value_errors)),
                   "The label values. Must be non-empty for In and NotIn, and empty for Exists and "
                   "DoesNotExist.")

    @validates_schema(skip_on_field_errors=False, pass_original=True)
    def _values_match_operator(self, data: dict[str, Any], original: Any, **_: Any) -> None:
        """Kube's rule: set operators need values, existence operators must not have any.

        Reads the original input so that values which failed their own checks still count as given.
        """
        problem = selector_values_error(data.get("operator") or "", original.get("values") or [])
        if problem:
            raise ValidationError([Problem(*problem)], field_name="values")


class LabelSelectorSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.LabelSelector"
    DESCRIPTION = ("A label selector is a label query over a set of resources. The result of matchLabels and "
                   "matchExpressions are ANDed. An empty label selector matches all objects. A null label "
                   "selector matches no objects.")

    matchLabels = Map(Str(), "A map of {key,value} pairs. A single {key,value} in the matchLabels map is "
                      "equivalent to an element of matchExpressions whose key field is \"key\", the operator "
                      "is \"In\", and the values array contains only \"value\". The requirements are ANDed.",
                      validate=check_label_map)
    matchExpressions = Array(Obj(LabelSelectorRequirementSchema),
                             "A list of label selector requirements. The requirements are ANDed.")


class PromotePolicySchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.PromotePolicy"
    DESCRIPTION = "Promote a number of free host nodes matching a label selector into the virtual cluster."

    labelSelector = Obj(LabelSelectorSchema,
                        "Selects the host nodes eligible for promotion. When unset, any free host node is "
                        "eligible.")
    nodeCount = Int("How many matching free host nodes to promote into the virtual cluster.", required=True,
                    validate=Range(min=0))


class NodeInfoSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.NodeInfo"
    DESCRIPTION = "A host node to promote, named explicitly (kubenest form)."

    nodeName = Str("Name of the host node to promote.", required=True, validate=Check(dns1123_subdomain_errors))


class PromoteResourcesSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.PromoteResources"
    DESCRIPTION = ("Host capacity for the virtual cluster: explicit host nodes promoted whole, and an amount of "
                   "resources served as a slice of the shared host or by promoting enough whole nodes "
                   "(resourcesMode).")

    nodes = Array(Str(validate=Check(dns1123_subdomain_errors)),
                  "Names of host nodes to promote (k8s-in-k8s proposal form).", validate=Unique())
    nodeInfos = Array(Obj(NodeInfoSchema), "Host nodes to promote (kubenest form).",
                      validate=Unique(lambda info: info.get("nodeName"), "nodeName"))
    resources = Map(Quantity(), "Resource amounts, such as cpu and memory, the virtual cluster gets besides its "
                    "named nodes. In Shared mode (the default) they are a slice of the shared host: the tenant sees "
                    "one virtual node of exactly this capacity, and its pods run in a host namespace of this "
                    "virtual cluster under a ResourceQuota of this size, so the amount is guaranteed and enforced "
                    "without taking machines away from the host (status.sharedResources). In Dedicated mode free "
                    "host nodes are promoted whole until the sum of their allocatable resources reaches every "
                    "amount.",
                    keys=Str(validate=Check(qualified_name_errors)))
    resourcesMode = Str("How resources are served. Shared (the default): a slice of the shared host's compute "
                        "shown as one virtual node, no host node is promoted for it; most tenants need an amount "
                        "of compute, not machines. Dedicated: whole free host nodes are promoted until their "
                        "allocatable resources cover every amount, for tenants that need machines of their own "
                        "(isolation, node-level access).",
                        validate=OneOf(RESOURCES_MODES), default=DEFAULT_MODE)


class KubeInKubeConfigSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.KubeInKubeConfig"
    DESCRIPTION = ("Shape of the tenant control plane when it runs as pods in the host cluster (the pods "
                   "runtime).")

    apiServerReplicas = Int("Number of tenant kube-apiserver replicas.", validate=Range(min=1))
    apiServerServiceType = Str("How the tenant kube-apiserver is exposed: nodePort (a NodePort Service) or "
                               "hostNetwork (pods on the host network).", validate=OneOf(SERVICE_TYPES))
    externalPort = Int("Port on which the tenant kube-apiserver is exposed; chosen by the server when unset.",
                       validate=Range(1, 65535))
    forceDestroy = Bool("Tear the control plane down on deletion even if releasing its nodes fails.")
    etcdStorageClass = Str("StorageClass of the tenant etcd volumes; the host default when unset.",
                           validate=Check(optional_subdomain_errors))
    etcdUnitSize = Quantity("Size of each tenant etcd volume, for example 1Gi.", minimum="positive")
    clusterCIDR = Str("Pod network CIDR of the tenant cluster, for example 10.244.0.0/16.",
                      validate=Check(cidr_errors, format="cidr"))


class HibernationSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.Hibernation"
    DESCRIPTION = ("When the tenant control plane is stopped so that the virtual cluster costs the host nothing but "
                   "its stored data: every component stopped (data kept) and every promoted node returned to the "
                   "host, until it wakes.")

    hibernated = Bool("Hibernate the virtual cluster now, and keep it hibernated until this is set to false (which "
                      "wakes it with every object it had, and promotes nodes again by the same rules).")
    afterInactivity = Duration("Hibernate by itself once the tenant apiserver has served no request from a user for "
                               "this long (a Go duration such as 30m or 1h30m). Requests of the tenant's own "
                               "components, nodes and service accounts, and of this server, do not count. Recorded "
                               "in status only: the spec is unchanged.")
    wakeOnAccess = Bool("Whether fetching the kubeconfig subresource of a virtual cluster hibernated for "
                        "inactivity wakes it (the fetch answers 409 Conflict while it wakes).", default=True)


def kubernetes_version_errors(value: str) -> list[str]:
    """The CRD pattern's message; whether the server offers the version is asked at admission."""
    return [] if kubeversion.parse(value) is not None else [f"should match '{kubeversion.PATTERN}'"]


def schedule_errors(value: str) -> list[str]:
    """A CronJob's schedule rules (robfig/cron's standard parser, its messages)."""
    try:
        cron.parse(value)
    except cron.CronError as e:
        return [str(e)]
    return []


class BackupSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.Backup"
    DESCRIPTION = ("Scheduled snapshots of the tenant's etcd, taken with etcd's snapshot API, verified, and kept "
                   "in the server's snapshot storage; the newest are listed in status.backups.")

    schedule = Str("When to take a snapshot, as a CronJob schedule in UTC: five fields (minute hour "
                   "day-of-month month day-of-week), a descriptor such as @daily, or @every with a Go duration.",
                   required=True, validate=Check(schedule_errors))
    keep = Int("How many snapshots to keep: the oldest beyond this many are deleted.", validate=Range(min=1),
               default=3)


class RestoreFromSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.RestoreFrom"
    DESCRIPTION = ("A snapshot this new virtual cluster's control plane starts from: the tenant's objects as they "
                   "were when it was taken, served with a fresh PKI and fresh credentials (a clone while its "
                   "VirtualCluster exists, a restore once it is gone). Needs get on virtualclusters/snapshots of "
                   "that VirtualCluster. Immutable.")

    virtualCluster = Str("Name of the VirtualCluster, in this namespace, that took the snapshot; it may since have "
                         "been deleted (snapshots outlive their VirtualCluster).", required=True,
                         validate=Check(dns1123_label_errors))
    snapshot = Str("Name of the snapshot, as that VirtualCluster's status.backups listed it.", required=True,
                   validate=Check(dns1123_subdomain_errors))


class SecretKeyRefSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.SecretKeyRef"
    DESCRIPTION = "A key of a Secret in the VirtualCluster's namespace."

    name = Str("Name of the Secret.", required=True, validate=Check(dns1123_subdomain_errors))
    key = Str("The key holding the kubeconfig.", default="kubeconfig", validate=Check(qualified_name_errors))


class ImportSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.Import"
    DESCRIPTION = ("An existing cluster served as this VirtualCluster: no control plane is built; its reachability, "
                   "version and nodes are reported in status, and the kubeconfig subresource issues revocable "
                   "per-caller credentials in it. Immutable.")

    kubeconfigSecretRef = Obj(SecretKeyRefSchema, "The Secret holding a kubeconfig of the cluster, with the right "
                              "to manage ServiceAccounts, ClusterRoleBindings and tokens there (what issued "
                              "credentials are made of).", required=True)


IMPORT_REFUSED = {
    "hibernation": "hibernate it", "backup": "snapshot it", "restoreFrom": "restore it from a snapshot",
    "promotePolicies": "promote host nodes into it", "promoteResources": "give it host compute",
    "kubeInKubeConfig": "shape its control plane",
}


class CredentialPolicySchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialPolicy"
    DESCRIPTION = "Limits on the credentials the kubeconfig subresource issues for this cluster."

    maxExpirationSeconds = Int("The longest a credential issued for this cluster lives, in seconds: it shortens "
                               "the default (3600) and the server's --max-kubeconfig-expiration, never lengthens "
                               "them.", format="int64", validate=Range(min=600))


class VirtualClusterSpecSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterSpec"
    DESCRIPTION = "The desired state of a VirtualCluster."

    externalIP = Str("An IP address or DNS name added to the tenant apiserver certificate's SANs; when set it "
                     "is also the host of the server URL in issued kubeconfigs. Immutable.",
                     validate=Check(optional_host_errors))
    externalIps = Array(Str(validate=Check(host_errors)),
                        "More IP addresses or DNS names for the tenant apiserver certificate's SANs. Immutable.")
    promotePolicies = Array(Obj(PromotePolicySchema),
                            "Label-selector based node promotion: each policy promotes nodeCount matching free "
                            "host nodes.")
    promoteResources = Obj(PromoteResourcesSchema,
                           "Explicit host nodes to promote into the virtual cluster, and an amount of resources: a "
                           "slice of the shared host by default, or whole promoted nodes (resourcesMode).")
    kubeInKubeConfig = Obj(KubeInKubeConfigSchema, "Control-plane shape for the pods runtime.")
    kubeconfig = Str("Reserved; never written by the server (credentials are served by the kubeconfig "
                     "subresource; an existing cluster is imported with spec.import).")
    credentials = Obj(CredentialPolicySchema, "Limits on the credentials issued for this cluster (each one a "
                      "VirtualClusterCredential, revoked by deleting it).")
    import_ = Obj(ImportSchema, "Serve an existing cluster instead of building a control plane. Set on create "
                  "only: immutable.", data_key="import")
    hibernation = Obj(HibernationSchema, "Hibernation: stop the control plane and return the nodes, on demand or "
                      "after inactivity, keeping every object of the tenant.")
    backup = Obj(BackupSchema, "Scheduled, verified snapshots of the tenant's etcd.")
    restoreFrom = Obj(RestoreFromSchema, "Start the control plane from a snapshot of a VirtualCluster in this "
                      "namespace instead of from nothing. Set on create only: immutable.")
    kubernetesVersion = Str("The Kubernetes version the control plane runs: a version the server offers "
                            "(v1.35.4), or a minor (1.34) for its newest patch there. Unset: the server's newest "
                            "when the cluster is built, then what it runs (status.kubernetesVersion). Changing it upgrades the cluster in place, one minor at a time "
                            "(a snapshot is taken first, and a failed upgrade rolls back by itself); a minor below "
                            "what the data was written with is refused.", validate=Check(kubernetes_version_errors))


class ConditionSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCondition"
    DESCRIPTION = "One aspect of a VirtualCluster's state, as seen at a given generation."

    type = Str("Type of condition: ControlPlaneReady, NodesReady, Ready, and Hibernated or Upgraded where those "
               "were used.", required=True,
               validate=Check(qualified_name_errors))
    status = Str("Status of the condition: True, False or Unknown.", required=True,
                 validate=OneOf(CONDITION_STATUSES))
    reason = Str("A machine-readable CamelCase reason for the condition's last transition.")
    message = Str("A human-readable explanation of the condition's last transition.")
    lastTransitionTime = Time("When the condition last changed status.")
    observedGeneration = Int("The metadata.generation the condition was set for; a condition older than the "
                             "object's generation is stale.", format="int64", validate=Range(min=0))


class NodeStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterNode"
    DESCRIPTION = ("A node of the virtual cluster: a host node promoted into it, or the virtual node of its shared "
                   "slice.")

    name = Str("Name of the node: the host node's, or the shared slice's virtual node in the tenant.",
               required=True, validate=Check(dns1123_subdomain_errors))
    phase = Str("Where the node is in its promotion: Claimed, Joining, Ready or Releasing; a node of an "
                "imported cluster is Ready or NotReady.", validate=OneOf(NODE_PHASES))
    shared = Bool("True for the virtual node that serves spec.promoteResources.resources as a shared slice: it "
                  "stands for no host node (its capacity is the slice, its pods run in "
                  "status.sharedResources.namespace), so nothing of the host is claimed or drained for it.")


class SharedResourcesSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterSharedResources"
    DESCRIPTION = ("The shared slice of the host that serves spec.promoteResources.resources (resourcesMode "
                   "Shared): where the tenant's pods run in the host, how much the slice holds and how much of it "
                   "is used.")

    namespace = Str("The host namespace the tenant's pods run in; the slice's ResourceQuota and LimitRange live "
                    "there.", validate=Check(dns1123_label_errors))
    capacity = Map(Quantity(), "The slice: the virtual node's capacity and the hard limits of the host "
                   "ResourceQuota, resource name to quantity.", keys=Str(validate=Check(qualified_name_errors)))
    used = Map(Quantity(), "What the tenant's pods use of the slice, as the host ResourceQuota counts it "
               "(requests), resource name to quantity.", keys=Str(validate=Check(qualified_name_errors)))


class BackupStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterBackup"
    DESCRIPTION = "A snapshot of the tenant's etcd that is kept."

    name = Str("Name of the snapshot, unique within the virtual cluster.", required=True)
    time = Time("When the snapshot was taken.")
    revision = Int("The etcd revision the snapshot holds the tenant's data at.", format="int64", validate=Range(min=0))
    sizeBytes = Int("Size of the snapshot file in bytes.", format="int64", validate=Range(min=0))
    verified = Bool("Whether the snapshot passed verification: etcd's SHA-256 of the data matches, and the data "
                    "is a well-formed etcd database.")
    reason = Str("Why it was taken: Scheduled (spec.backup, or asked for) or PreUpgrade (before an upgrade's "
                 "first component changed; spec.backup's keep counts it with the others).",
                 validate=OneOf(BACKUP_REASONS))


class UpgradeStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterUpgrade"
    DESCRIPTION = "The last upgrade of the control plane's Kubernetes version."

    fromVersion = Str("The version the control plane ran before.")
    toVersion = Str("The version it was upgraded to.")
    state = Str("InProgress, Succeeded, or RolledBack (the control plane is back on fromVersion; it is not tried "
                "again until the spec changes).", validate=OneOf(UPGRADE_STATES))
    snapshot = Str("The snapshot taken before the first component changed (status.backups, reason PreUpgrade).")
    startTime = Time("When the upgrade started.")
    completionTime = Time("When it succeeded or was rolled back.")
    durationSeconds = Int("How long it took, in seconds.", validate=Range(min=0))
    observedGeneration = Int("The metadata.generation whose spec.kubernetesVersion this upgrade is for.",
                             format="int64", validate=Range(min=0))
    message = Str("What happened, and for a rollback why.")


class RotationStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialRotation"
    DESCRIPTION = ("Where the last rotation of one kind of credential stands (asked for with the annotations "
                   "kosmos.io/<kind>-rotation-start and -complete).")

    phase = Str("Preparing (the new one is being made trusted everywhere), Prepared (both work; the new one "
                "signs), Completing (the old one is being dropped) or Completed.",
                validate=OneOf(("Preparing", "Prepared", "Completing", "Completed")))
    lastInitiationTime = Time("When the rotation started.")
    lastInitiationFinishedTime = Time("When it was prepared: the new CA or key signs, both work.")
    lastCompletionTime = Time("When it completed: only the new CA or key works.")


class CredentialsRotationSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialsRotation"
    DESCRIPTION = "The rotations of the tenant's credentials, each kind on its own."

    clientCA = Obj(RotationStatusSchema, "The client CA: the CA of the credentials the kubeconfig subresource "
                   "issues.")
    serviceAccountKey = Obj(RotationStatusSchema, "The key that signs and verifies the tenant's service-account "
                            "tokens.")


class CredentialsStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterCredentialsStatus"
    DESCRIPTION = "The tenant's credentials as a whole."

    rotation = Obj(CredentialsRotationSchema, "Rotations of the client CA and the service-account key.")


class VirtualClusterStatusSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterStatus"
    DESCRIPTION = "The observed state of a VirtualCluster, written by the reconciler through /status."

    phase = Str("Lifecycle phase: Pending, Preparing, Initialized, Completed, Updating, Hibernating, Hibernated, "
                "Waking or Deleting. No phase is terminal: failures are retried and explained in reason, message and "
                "conditions.",
                validate=OneOf(PHASES))
    reason = Str("A machine-readable CamelCase reason for the last phase transition.")
    message = Str("A human-readable explanation of the last phase transition.")
    updateTime = Time("When the phase last changed.")
    observedGeneration = Int("The metadata.generation this status describes.", format="int64",
                             validate=Range(min=0))
    conditions = Array(Obj(ConditionSchema), "ControlPlaneReady, NodesReady and Ready conditions, and Hibernated "
                       "where hibernation is used; `kubectl wait --for=condition=Ready` waits on Ready.",
                       validate=Unique(lambda c: c.get("type"), "type"))
    controlPlaneEndpoint = Str("URL (https://host:port) of the tenant kube-apiserver.")
    kubernetesVersion = Str("The Kubernetes version the control plane runs (for an imported cluster, what its "
                            "apiserver reports); during an upgrade, the version being left until it succeeds.")
    upgrade = Obj(UpgradeStatusSchema, "The last upgrade of spec.kubernetesVersion: in progress, done or rolled "
                  "back.")
    port = Int("Port of the tenant kube-apiserver.", validate=Range(1, 65535))
    nodes = Array(Obj(NodeStatusSchema), "Host nodes promoted into the virtual cluster and their phases, and the "
                  "virtual node of a shared slice (shared: true).",
                  validate=Unique(lambda n: n.get("name"), "name"))
    sharedResources = Obj(SharedResourcesSchema, "The shared slice serving spec.promoteResources.resources, when "
                          "there is one: its host namespace, its capacity and its use.")
    backups = Array(Obj(BackupStatusSchema), "The snapshots kept (spec.backup), oldest first.",
                    validate=Unique(lambda b: b.get("name"), "name"))
    credentials = Obj(CredentialsStatusSchema, "Rotations of the tenant's client CA and service-account key, once "
                      "one was asked for.")


class OwnerReferenceSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.OwnerReference"
    DESCRIPTION = ("OwnerReference contains enough information to let you identify an owning object. An owning "
                   "object must be in the same namespace as the dependent, or be cluster-scoped.")
    MAP_TYPE = "atomic"  # kube's +structType=atomic: an owner reference is owned whole

    apiVersion = Str("API version of the referent.", required=True)
    kind = Str("Kind of the referent.", required=True)
    name = Str("Name of the referent.", required=True)
    uid = Str("UID of the referent.", required=True)
    controller = Bool("If true, this reference points to the managing controller.")
    blockOwnerDeletion = Bool("If true and the owner has the foregroundDeletion finalizer, the owner cannot be "
                              "deleted from the key-value store until this reference is removed.")


class ManagedFieldsEntrySchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ManagedFieldsEntry"
    DESCRIPTION = ("ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that "
                   "the fieldset applies to.")

    manager = Str("An identifier of the workflow managing these fields.")
    operation = Str("The type of operation which lead to this entry being created: Apply or Update.")
    apiVersion = Str("The version of this resource that this field set applies to, as group/version.")
    time = Time("When this entry was added; also updated when a field is added or the manager changes an "
                "owned field's value.")
    fieldsType = Str("The discriminator for the different fields format and version; only FieldsV1.")
    fieldsV1 = FreeObject(FIELDS_V1_REF, "The first JSON version of the set of fields this entry manages.")
    subresource = Str("The name of the subresource used to update the object, or empty for the main resource.")


class ObjectMetaSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ObjectMeta"
    DESCRIPTION = ("ObjectMeta is metadata that all persisted resources must have, which includes all objects "
                   "users must create.")

    name = Str("Name must be unique within a namespace; for a VirtualCluster it must be a DNS-1123 label. "
               "Cannot be updated.")
    generateName = Str("An optional prefix used by the server to generate a unique name when name is not "
                       "provided.")
    namespace = Str("The namespace the object lives in; it must be a DNS-1123 label. Cannot be updated.")
    selfLink = Str("Deprecated and unset by the server.")
    uid = Str("The unique in time and space value for this object, generated by the server on create. "
              "Read-only.")
    resourceVersion = Str("An opaque value identifying the internal version of this object, used for optimistic "
                          "concurrency and watches. Read-only.")
    generation = Int("A sequence number representing a specific generation of the desired state: 1 on create, "
                     "incremented on every spec change. Read-only.", format="int64")
    creationTimestamp = Time("When the server created this object. Read-only.")
    deletionTimestamp = Time("When the object was asked to be deleted; it is removed once its finalizers are "
                             "empty. Read-only.")
    deletionGracePeriodSeconds = Int("Seconds allowed for graceful termination before removal. Read-only.",
                                     format="int64")
    labels = Map(Str(), "Map of string keys and values used to organize and select objects.")
    annotations = Map(Str(), "Unstructured key value map stored with the object, set by external tools.")
    # The list types are kube's own for ObjectMeta (its +listType markers): field management reads them.
    ownerReferences = Array(Obj(OwnerReferenceSchema), "Objects this object depends on; it is garbage collected "
                            "when all of them are gone.", metadata={LIST_TYPE: "map", LIST_MAP_KEYS: ["uid"]})
    finalizers = Array(Str(), "Entries that must be empty before the object is removed from the registry; the "
                       "server adds kosmos.io/virtualcluster on create.", metadata={LIST_TYPE: "set"})
    managedFields = Array(Obj(ManagedFieldsEntrySchema), "Which field manager manages which fields. Mostly for "
                          "internal housekeeping.", metadata={LIST_TYPE: "atomic"})


class ListMetaSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.ListMeta"
    DESCRIPTION = "ListMeta describes metadata that synthetic resources must have, including lists."

    selfLink = Str("Deprecated and unset by the server.")
    resourceVersion = Str("The version of the list, usable to start a watch from this point.")
    # A Python keyword, hence declared through data_key.
    continue_ = Str("Set when the list was truncated by limit: pass it back as continue to get the next page.",
                    data_key="continue")
    remainingItemCount = Int("Number of items after this page, when known (limited list).", format="int64")


class VirtualClusterSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualCluster"
    DESCRIPTION = ("A tenant Kubernetes control plane run for a namespace of the host cluster, with host nodes "
                   "promoted into it and a slice of the shared host's compute.")
    GVK = ({"group": VIRTUALCLUSTERS.group, "kind": VIRTUALCLUSTERS.kind, "version": VIRTUALCLUSTERS.version},)

    apiVersion = _api_version()
    kind = _kind()
    metadata = Obj(ObjectMetaSchema, "Standard object's metadata.")
    spec = Obj(VirtualClusterSpecSchema, "The desired state of the virtual cluster.")
    status = Obj(VirtualClusterStatusSchema, "The observed state of the virtual cluster. Read-only for the main "
                 "resource: written through the status subresource.")


class VirtualClusterListSchema(KubeSchema):
    OPENAPI_NAME = f"{DEFINITION_PREFIX}.VirtualClusterList"
    DESCRIPTION = "A list of VirtualClusters."
    GVK = ({"group": VIRTUALCLUSTERS.group, "kind": VIRTUALCLUSTERS.list_kind,
            "version": VIRTUALCLUSTERS.version},)

    apiVersion = _api_version()
    kind = _kind()
    metadata = Obj(ListMetaSchema, "Standard list metadata.")
    items = Array(Obj(VirtualClusterSchema), "The VirtualClusters.", required=True)


_SPEC = VirtualClusterSpecSchema()
_STATUS = VirtualClusterStatusSchema()
_OBJECT = VirtualClusterSchema()


# --------------------------------------------------------------------------- public API


def validate_spec(spec: Any) -> list[Cause]:
    """Causes for everything wrong in ``spec`` (``None``, i.e. absent, is an empty spec)."""
    return validate_with(_SPEC, spec, "spec")


def import_conflicts(spec: Any) -> list[Cause]:
    """An imported cluster has no control plane here: what would act on one is refused, naming the field
    (a rule across fields, kept out of the schema so that the write path's fast check still applies)."""
    if not isinstance(spec, dict) or spec.get("import") is None:
        return []
    return [Problem(FIELD_VALUE_FORBIDDEN, f"an imported cluster has no control plane here to {what}").cause(
        f"spec.{name}") for name, what in IMPORT_REFUSED.items() if spec.get(name) not in (None, [], {})]


def validate_status(status: Any) -> list[Cause]:
    """Causes for everything wrong in ``status`` (``None`` is an empty status)."""
    return validate_with(_STATUS, status, "status")


def unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Paths of a whole VirtualCluster that no schema field declares, in kube's format
    (``spec.foo``, ``spec.promotePolicies[0].bar``), for fieldValidation Strict/Warn."""
    return unknown_in(_OBJECT, obj)


def prune_unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Drop, in place, every field :func:`unknown_fields` reports, and return their paths: what is
    stored is what is declared, as a structural CRD schema prunes (fieldValidation Warn and Ignore).
    Then, as its defaulting does, a present object gets the declared defaults of the fields it lacks
    (``spec.hibernation.wakeOnAccess: true``).

    Declared fields are stored in their declared type, as kube-apiserver stores a custom resource:
    a null where the field is optional is dropped (as it prunes nulls of non-nullable fields) and an
    integer written as ``100.0`` is stored as ``100`` (as Go encodes a whole float64)."""
    return prune(_OBJECT, obj)
