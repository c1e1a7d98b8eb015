//! The catalog's entries: Cache.

use super::Scope::Cache;
use super::{Entry, NOTHING, fine, problem, waiting};

pub(super) const ENTRIES: &[Entry] = &[
    waiting(
        "Pending",
        Cache,
        "The StatefulSet has no pods yet.",
        "Nothing to do unless it lasts; then `kubectl describe statefulset NAME-cache` (quota, scheduling).",
    ),
    waiting(
        "Provisioning",
        Cache,
        "Some replicas are not ready yet.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists (image pulls, scheduling, memory).",
    ),
    fine("Ready", Cache, "Every replica is ready.", NOTHING),
    problem(
        "Failed",
        Cache,
        "The spec cannot be built into objects (see InvalidSpec).",
        "Fix the spec as the Ready condition's message says.",
    ),
    fine("AllReplicasAvailable", Cache, "Every replica's pod is ready.", NOTHING),
    waiting(
        "ReplicasNotReady",
        Cache,
        "Some replicas' pods are not ready; the message counts them.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists (events, image pulls, scheduling). In a Cache with Sentinel a restarted primary's pod is not ready until the Sentinels promote a replica (seconds, at most 140 s): `kubectl logs POD -c cache` says `the Sentinels name this pod the primary: waiting ...`.",
    ),
    fine("ResolvedRefs", Cache, "Every Secret the Cache references exists with the keys it needs.", NOTHING),
    problem(
        "TLSSecretNotFound",
        Cache,
        "spec.tls.secretName names a Secret that does not exist in the Cache's namespace; the pods cannot start.",
        "Create it (e.g. a cert-manager Certificate with that secretName); the Cache follows at once.",
    ),
    problem(
        "TLSSecretIncomplete",
        Cache,
        "The TLS Secret lacks tls.crt, tls.key or (replicated) ca.crt; the pods cannot start.",
        "Add the missing keys (cert-manager writes all three).",
    ),
    problem(
        "InvalidSpec",
        Cache,
        "The spec passed the schema but cannot be built (e.g. memory that does not fit the engine); the message says why.",
        "Fix the field the message names.",
    ),
    problem(
        "ApplyFailed",
        Cache,
        "The API server refused one of the Cache's objects (NetworkPolicy, StatefulSet, Service, ConfigMap, PodDisruptionBudget); the message quotes it.",
        "Fix what the API server names (often a quota or a policy admission webhook); refusals wait for a spec change, other errors are retried.",
    ),
    problem(
        "PodSecurityRejected",
        Cache,
        "The namespace's Pod Security level refused the Cache's pods (the message quotes the API server); no pod starts.",
        "Blockwork's pods meet `restricted` as shipped: look for an image or setting given at install that breaks it (`blockwork check`), or a namespace label stricter than the standards.",
    ),
    problem(
        "QuotaExceeded",
        Cache,
        "A ResourceQuota of the namespace refused a pod: the Cache's memory (request = limit = spec.memory) or CPU does not fit.",
        "Raise the quota, or lower spec.memory or spec.replicas; the StatefulSet retries by itself.",
    ),
    problem(
        "PodCreateRefused",
        Cache,
        "The API server refused to create a pod (a LimitRange, an admission webhook, a policy engine); the message quotes it.",
        "Fix what the message names; the StatefulSet retries by itself.",
    ),
    problem(
        "Unschedulable",
        Cache,
        "No node can take a pod; the scheduler's message says why (resources, taints, spread with --cache-node-spread=required).",
        "Add capacity, lower spec.memory, or allow the pods where the message says; the scheduler retries by itself.",
    ),
    problem(
        "ImagePullFailed",
        Cache,
        "A node cannot pull an image of the Cache's pods (a wrong reference, a registry it cannot reach, a missing pull Secret).",
        "Check the images set at install (`blockwork check` lists them) and that the pull Secrets exist in the Cache's namespace; the kubelet retries by itself.",
    ),
    problem(
        "ContainerConfigError",
        Cache,
        "A container of the Cache's pods cannot be created (a missing Secret or key, a runtime error); the message quotes the kubelet.",
        "Fix what the message names (for TLS, the Secret's keys); the kubelet retries by itself.",
    ),
    problem(
        "ContainerCrashing",
        Cache,
        "A container keeps exiting (CrashLoopBackOff); the message has its exit code and last words.",
        "Read `kubectl logs POD -c CONTAINER --previous`; an image without sh, timeout or the engine's CLI cannot run the start scripts.",
    ),
    fine("SentinelReported", Cache, "status.primary is the primary Sentinel reports now.", NOTHING),
    waiting(
        "NoSentinelReady",
        Cache,
        "No pod of the replicated Cache is ready, so there is no Sentinel to ask for the primary yet.",
        "Nothing to do unless it lasts; then look at the pods `blockwork explain` lists.",
    ),
    waiting(
        "PrimaryDown",
        Cache,
        "Sentinel sees the primary down; it promotes a replica once a majority of Sentinels agree (5 s without an answer).",
        "Nothing to do unless it lasts: fewer than a majority of pods running keeps Sentinel from failing over.",
    ),
    waiting(
        "FailoverInProgress",
        Cache,
        "Sentinel is promoting a replica in place of the primary; status.primary follows when it is done.",
        "Nothing to do unless it lasts longer than the failover timeout (60 s).",
    ),
    problem(
        "SentinelUnreachable",
        Cache,
        "No Sentinel of the ready pods answered within 2 s; status.primary is the last one known. The reconcile itself goes on.",
        "Check that the operator's pods reach the Cache's pods on port 26379: the Cache's NetworkPolicy admits the pods --cache-operator-namespace and --cache-operator-pod-labels name (the chart sets its own), another NetworkPolicy may not; the operator's log has each error.",
    ),
    problem("ReconcilePanicked", Cache, "The Cache controller panicked on this object; retried.", "Report a bug with the event's message."),
    problem(
        "CleanupIncomplete",
        Cache,
        "Deleting the Cache's objects failed in part; the Cache was released anyway.",
        "Delete the objects named in the message.",
    ),
    problem(
        "CleanupTimedOut",
        Cache,
        "Deleting the Cache's objects took longer than 30 s; the Cache was released anyway.",
        "Delete what is left: `kubectl get statefulset,service,configmap,pdb -l app.kubernetes.io/instance=NAME`.",
    ),
    fine(
        "NetworkPolicyApplied",
        Cache,
        "The Cache's NetworkPolicy admits only its clients (its namespace and spec.access) and Blockwork's own peers; the message says whom.",
        "Nothing to do; `blockwork check` says whether the cluster's network plugin enforces it.",
    ),
    problem(
        "NetworkPoliciesOff",
        Cache,
        "The installation applies no NetworkPolicy (--cache-network-policies=false): any pod that reaches the Cache's pods, in any namespace, may connect; one applied before stays until deleted.",
        "Install a NetworkPolicy implementation and turn them on (the chart's controllers.cache.networkPolicies=true); until then isolate the Cache with a NetworkPolicy of your own.",
    ),
    fine("ReconcileSuccess", Cache, "Every object of the Cache is applied.", NOTHING),
    waiting(
        "ReconcilePaused",
        Cache,
        "Reconciling is paused by the annotation blockwork.dev/paused.",
        "`blockwork resume cache/NAME` to reconcile again.",
    ),
    problem(
        "InvalidAnnotation",
        Cache,
        "A blockwork.dev/ annotation (or the conversion's cache.blockwork.dev/ one) is invalid; the Cache is held as if paused.",
        "Fix or remove the annotation named in the message.",
    ),
    problem(
        "ConversionFailed",
        Cache,
        "The API server's request to convert a Cache between v1alpha1 and v1beta1 was refused by the webhook (the object would break v1beta1's rules).",
        "Make the v1alpha1 write meet v1beta1's rules, or write v1beta1.",
    ),
];
