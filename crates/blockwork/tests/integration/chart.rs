#![allow(clippy::unwrap_used, clippy::panic)]
//! The Helm chart (charts/blockwork), with the `helm` that `scripts/install-test-tools` builds:
//! it lints; what it is generated from is current; it sets every `blockwork run` flag an
//! operator would; its RBAC is what `blockwork rbac` generates for the same options; bad values
//! fail with a message; every rendered option is accepted by a real kube-apiserver (server-side
//! dry run, restricted Pod Security warnings counted as failures); and every dashboard and alert
//! expression parses and names only metrics the binary exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use blockwork_testenv::commands::tool;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_blockwork");
const RELEASE: &str = "t";
const FULLNAME: &str = "t-blockwork";
const ZONES: [&str; 2] = ["controllers.cert.dnsZones[0].name=example.com", "controllers.cert.dnsZones[0].id=Z0123456789ABCDEFGHIJ"];

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/blockwork")
}

/// `helm args` with `env`.
fn helm(args: &[&str], env: &[(&str, &Path)]) -> Output {
    std::process::Command::new(tool("helm").unwrap()).args(args).envs(env.iter().copied()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `helm template` of the chart in `namespace` with `sets`; the error text if it fails.
fn try_render(namespace: &str, sets: &[&str]) -> Result<String, String> {
    let chart = chart();
    let mut args = vec!["template", RELEASE, chart.to_str().unwrap(), "--namespace", namespace];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = helm(&args, &[]);
    if out.status.success() { Ok(text(&out.stdout)) } else { Err(text(&out.stderr)) }
}

fn render(namespace: &str, sets: &[&str]) -> String {
    try_render(namespace, sets).unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"))
}

fn documents(yaml: &str) -> Vec<Value> {
    yaml.split("\n---")
        .map(|d| d.trim_start_matches("-\n"))
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .filter(|v| v.is_object())
        .collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn blockwork(args: &[&str]) -> String {
    let out = std::process::Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "blockwork {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn the_chart_lints_clean() {
    let chart = chart();
    for sets in [vec![], vec!["controllers.cert.enabled=true", ZONES[0], ZONES[1], "controllers.tenant.enabled=true"]] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let out = helm(&args, &[]);
        assert!(out.status.success(), "helm lint {sets:?}:\n{}{}", text(&out.stdout), text(&out.stderr));
    }
}

#[test]
fn what_the_chart_is_generated_from_is_current() {
    let dir = tempfile::tempdir().unwrap();
    blockwork(&["chart-files", "--output-dir", dir.path().to_str().unwrap()]);
    let files = chart().join("files");
    let mut generated: Vec<PathBuf> =
        std::fs::read_dir(dir.path().join("crds")).unwrap().map(|e| PathBuf::from("crds").join(e.unwrap().file_name())).collect();
    generated.push("controllers.yaml".into());
    let checked_in = std::fs::read_dir(files.join("crds")).unwrap().count() + 1;
    assert_eq!(generated.len(), checked_in, "charts/blockwork/files/crds has stale files: run `make chart`");
    for file in generated {
        let want = std::fs::read_to_string(dir.path().join(&file)).unwrap();
        let have = std::fs::read_to_string(files.join(&file)).unwrap_or_default();
        assert!(want == have, "charts/blockwork/files/{} is stale: run `make chart`", file.display());
    }
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/prometheus");
    for entry in std::fs::read_dir(&config).unwrap() {
        let name = entry.unwrap().file_name();
        let copy = std::fs::read_to_string(files.join("prometheus").join(&name)).unwrap_or_default();
        assert!(copy == std::fs::read_to_string(config.join(&name)).unwrap(), "files/prometheus/{name:?} is stale: run `make chart`");
    }
}

#[test]
fn the_chart_and_its_image_follow_the_workspace_version() {
    let chart: Value = serde_saphyr::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap()).unwrap();
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let deployment = documents(&render("ops", &[])).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("localhost/blockwork:{}", env!("CARGO_PKG_VERSION")),
        "the reference scripts/build-image writes"
    );
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
}

/// The leaf keys of values.yaml (free-form maps such as `resources` count as leaves).
fn value_keys(value: &Value, prefix: &str, keys: &mut Vec<String>) {
    match value.as_object() {
        Some(map)
            if !map.is_empty() && !["resources", "podSecurityContext", "securityContext", "labels"].iter().any(|f| prefix.ends_with(f)) =>
        {
            for (key, child) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                value_keys(child, &path, keys);
            }
        }
        _ => keys.push(prefix.to_owned()),
    }
}

#[test]
fn every_value_is_documented_in_the_chart_readme() {
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    let mut keys = Vec::new();
    value_keys(&values, "", &mut keys);
    let missing: Vec<_> = keys.iter().filter(|k| !readme.contains(&format!("| `{k}` |"))).collect();
    assert!(missing.is_empty(), "values missing from the README's values table: {missing:?}");
}

/// Flags the chart does not set, and why.
const NOT_SET_BY_THE_CHART: &[(&str, &str)] = &[
    ("--help", "not a setting"),
    ("--leader-election-namespace", "the pod's namespace, the default"),
    ("--aws-region", "`aws.region` sets AWS_REGION, which this flag and the AWS SDK read"),
    ("--aws-endpoint-url", "`aws.endpointUrl` sets AWS_ENDPOINT_URL, which this flag and the AWS SDK read"),
    ("--rotator-namespaces", "`namespaces` applies to every controller, and the RBAC follows it"),
];

#[test]
fn every_run_flag_is_set_by_the_chart_or_deliberately_left_out() {
    let help = blockwork(&["run", "--help"]);
    let flags: BTreeSet<String> = help
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .map(|l| format!("--{}", l.split([' ', '=', '<']).next().unwrap_or_default()))
        .collect();
    let everything = ["controllers.cert.enabled=true", ZONES[0], ZONES[1], "controllers.tenant.enabled=true"];
    let mut set = BTreeSet::new();
    for extra in [
        &[][..],
        &[
            "namespaces={a}",
            "aws.quotas={acm.RequestCertificate=10,route53.changes=200/2000}",
            "aws.endpointUrls.acm=http://127.0.0.1:1",
            "aws.endpointUrls.cloudfront=http://127.0.0.1:1",
            "aws.endpointUrls.route53=http://127.0.0.1:2",
            "aws.endpointUrls.sts=http://127.0.0.1:2",
        ][..],
        &[
            "webhook.certificates.mode=cert-manager",
            "controllers.cert.exportSecrets=true",
            "controllers.cert.certificateAuthorities={arn:aws:acm-pca:us-east-1:111122223333:certificate-authority/11111111-2222-3333-4444-555555555555}",
            "aws.endpointUrls.acm-pca=http://127.0.0.1:3",
        ][..],
        &[
            "controllers.cache.imagePullPolicy=Always",
            "controllers.cache.imagePullSecrets[0].name=mirror",
            "controllers.cache.cpuLimit=1",
            "controllers.cache.runAsUser=1001",
            "controllers.cache.exporter.scrapedFrom.namespace=monitoring",
        ][..],
    ] {
        let sets: Vec<&str> = everything.iter().chain(extra).copied().collect();
        let deployment = documents(&render("ops", &sets)).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
        for arg in deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap() {
            set.insert(arg.as_str().unwrap().split('=').next().unwrap().to_owned());
        }
    }
    let unset: Vec<_> = flags.iter().filter(|f| !set.contains(*f) && !NOT_SET_BY_THE_CHART.iter().any(|(n, _)| n == f)).collect();
    assert!(unset.is_empty(), "`blockwork run` flags the chart neither sets nor lists in NOT_SET_BY_THE_CHART: {unset:?}");
}

/// What a set of RBAC objects grants: per scope (`cluster` or a namespace), (group, resource,
/// name or `*`, verb). Every role must be bound to the ServiceAccount `subject`.
fn grants(documents: &[&Value], subject: (&str, &str)) -> BTreeMap<String, BTreeSet<(String, String, String, String)>> {
    let bound: BTreeSet<(String, String)> = documents
        .iter()
        .filter(|d| d["kind"].as_str().unwrap().ends_with("Binding"))
        .filter(|d| d["subjects"].as_array().unwrap().iter().any(|s| s["name"] == subject.0 && s["namespace"] == subject.1))
        .map(|d| (d["roleRef"]["kind"].as_str().unwrap().to_owned(), d["roleRef"]["name"].as_str().unwrap().to_owned()))
        .collect();
    let mut grants: BTreeMap<String, BTreeSet<_>> = BTreeMap::new();
    for role in documents.iter().filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole") {
        let (kind, name) = (role["kind"].as_str().unwrap(), role["metadata"]["name"].as_str().unwrap());
        assert!(bound.contains(&(kind.to_owned(), name.to_owned())), "{kind} {name} is not bound to the ServiceAccount");
        let scope = role["metadata"]["namespace"].as_str().unwrap_or("cluster").to_owned();
        for rule in role["rules"].as_array().unwrap() {
            let list = |key: &str| {
                rule[key]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                    .unwrap_or_else(|| vec!["*".to_owned()])
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for name in list("resourceNames") {
                        for verb in list("verbs") {
                            grants.entry(scope.clone()).or_default().insert((group.clone(), resource.clone(), name.clone(), verb));
                        }
                    }
                }
            }
        }
    }
    grants
}

#[test]
fn the_rbac_the_chart_grants_is_what_blockwork_rbac_generates() {
    let all = ["controllers.cert.enabled=true", ZONES[0], ZONES[1], "controllers.tenant.enabled=true"];
    let cases: Vec<(Vec<&str>, &str, Vec<&str>)> = vec![
        (vec![], "cache,rotator", vec![]),
        (all.to_vec(), "aws_identity,cache,cert,tenant,rotator", vec![]),
        (all.iter().copied().chain(["namespaces={a,b}"]).collect(), "aws_identity,cache,cert,tenant,rotator", vec!["--namespaces", "a,b"]),
        (
            all.iter().copied().chain(["webhook.certificates.mode=cert-manager"]).collect(),
            "aws_identity,cache,cert,tenant,rotator",
            vec!["cert-manager"],
        ),
        (
            vec![
                "controllers.cache.enabled=false",
                "controllers.rotator.enabled=false",
                "controllers.cert.enabled=true",
                ZONES[0],
                ZONES[1],
            ],
            "aws_identity,cert",
            vec![],
        ),
        (vec!["controllers.cache.enabled=false"], "rotator", vec![]),
        // NetworkPolicies are on by default, and their rules with them; turned off, neither.
        (vec!["controllers.cache.networkPolicies=false"], "cache,rotator", vec!["--opt-out", "cache.network-policies"]),
        (
            vec!["controllers.cache.networkPolicies=false", "namespaces={a,b}"],
            "cache,rotator",
            vec!["--opt-out", "cache.network-policies", "--namespaces", "a,b"],
        ),
        // Export into Secrets, enabled at install: its rules, cluster-wide or per namespace.
        (
            all.iter().copied().chain(["controllers.cert.exportSecrets=true"]).collect(),
            "aws_identity,cache,cert,tenant,rotator",
            vec!["--opt-in", "cert.export-secrets"],
        ),
        (
            vec![
                "controllers.cache.enabled=false",
                "controllers.rotator.enabled=false",
                "controllers.cert.enabled=true",
                ZONES[0],
                ZONES[1],
                "controllers.cert.exportSecrets=true",
                "namespaces={a,b}",
            ],
            "aws_identity,cert",
            vec!["--opt-in", "cert.export-secrets", "--namespaces", "a,b"],
        ),
    ];
    for (sets, controllers, extra) in cases {
        let rendered = documents(&render("ops", &sets));
        // The roles aggregated into Kubernetes' default roles are people's, not the operator's.
        let for_people = |d: &Value| d["metadata"]["labels"].as_object().is_some_and(|l| l.keys().any(|k| k.contains("/aggregate-to-")));
        let chart_rbac: Vec<&Value> =
            rendered.iter().filter(|d| d["apiVersion"] == "rbac.authorization.k8s.io/v1" && !for_people(d)).collect();
        let mut args = vec!["rbac", "--controllers", controllers, "--name", FULLNAME, "--namespace", "ops", "--service-account", FULLNAME];
        if extra.first() != Some(&"cert-manager") {
            args.extend(&extra);
        }
        if extra.first() != Some(&"cert-manager") {
            args.extend(["--webhook-certificate-secret", "t-blockwork-webhook-tls", "--webhook-configuration-name", FULLNAME]);
        }
        let generated = documents(&blockwork(&args));
        let generated: Vec<&Value> = generated.iter().collect();
        assert_eq!(
            grants(&chart_rbac, (FULLNAME, "ops")),
            grants(&generated, (FULLNAME, "ops")),
            "chart {sets:?} against blockwork {args:?}: run `make chart` if a controller's rules changed"
        );
    }
}

/// The verbs ClusterRoles aggregated into the default role `to` grant on `group`/`resource`.
fn aggregated_verbs(documents: &[Value], to: &str, group: &str, resource: &str) -> BTreeSet<String> {
    let label = format!("rbac.authorization.k8s.io/aggregate-to-{to}");
    of_kind(documents, "ClusterRole")
        .into_iter()
        .filter(|role| role["metadata"]["labels"][&label] == "true")
        .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
        .filter(|rule| {
            let has = |field: &str, value: &str| rule[field].as_array().is_some_and(|values| values.iter().any(|v| v == value));
            has("apiGroups", group) && has("resources", resource)
        })
        .flat_map(|rule| rule["verbs"].as_array().cloned().unwrap_or_default())
        .filter_map(|verb| verb.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn people_who_may_view_or_edit_a_namespace_may_read_or_annotate_the_enabled_kinds() {
    let rendered = documents(&render("ops", &["controllers.cert.enabled=true", ZONES[0], ZONES[1]]));
    let set = |verbs: &[&str]| verbs.iter().map(|v| (*v).to_owned()).collect::<BTreeSet<String>>();
    for to in ["view", "edit", "admin"] {
        assert!(aggregated_verbs(&rendered, to, "acm.blockwork.dev", "certs").is_superset(&set(&["get", "list", "watch"])), "{to}");
        assert!(aggregated_verbs(&rendered, to, "cache.blockwork.dev", "caches").contains("list"), "{to}");
    }
    for to in ["edit", "admin"] {
        assert!(aggregated_verbs(&rendered, to, "acm.blockwork.dev", "certs").contains("patch"), "retry, pause: {to}");
    }
    assert!(!aggregated_verbs(&rendered, "view", "acm.blockwork.dev", "certs").contains("patch"), "view only reads");
    assert!(aggregated_verbs(&rendered, "view", "cloudfront.blockwork.dev", "distributiontenants").is_empty(), "a disabled kind");

    let off = documents(&render("ops", &["rbac.aggregateToDefaultRoles=false"]));
    assert!(aggregated_verbs(&off, "view", "cache.blockwork.dev", "caches").is_empty());
}

#[test]
fn bad_values_are_refused_with_a_message_naming_them() {
    for (sets, expected) in [
        (vec!["controllers.cert.enabeld=true"], "enabeld"),
        (
            vec!["controllers.cert.enabled=true", "controllers.cert.dnsZones[0].name=example.com", "controllers.cert.dnsZones[0].id=zone"],
            "id",
        ),
        (vec!["webhook.certificates.mode=cert-manger"], "cert-manager"),
        (vec!["controllers.tenant.driftPolicy=ignore"], "driftPolicy"),
        (vec!["aws.roleArn=my-role"], "roleArn"),
        (vec!["aws.accessKeyId=AKIA"], "accessKeyId"),
        (vec!["replicaCount=2", "leaderElection.enabled=false"], "leaderElection.enabled=true"),
        (vec!["controllers.cache.enabled=false", "controllers.rotator.enabled=false"], "no controller is enabled"),
        (vec!["maxConcurrentReconciles=0"], "maxConcurrentReconciles"),
        (vec!["aws.quotaSafetyFactor=1.5"], "quotaSafetyFactor"),
        (vec!["aws.quotas={s3=100}"], "quotas"),
        (vec!["aws.endpointUrls.sqs=http://127.0.0.1:1"], "sqs"),
        (vec!["tracing.endpoint=collector:4318"], "endpoint"),
        (vec!["tracing.protocol=http/json"], "protocol"),
        (vec!["tracing.sampler=parentbased_traceidratio"], "samplerArg"),
        (vec!["controllers.cache.images.redis.repository=Redis"], "images/redis/repository"),
        (vec!["controllers.cache.registry=https://mirror.example.com"], "registry"),
        (vec!["controllers.cache.networkPolicies=yes"], "networkPolicies"),
        (vec!["controllers.cache.exporter.scrapedFrom.namespace=Monitoring"], "scrapedFrom/namespace"),
        (vec!["controllers.cache.cpuRequest=lots"], "cpuRequest"),
        (vec!["controllers.cache.nodeSpread=always"], "nodeSpread"),
    ] {
        let error = try_render("ops", &sets).expect_err(&format!("{sets:?} renders"));
        assert!(error.contains(expected), "{sets:?}: the error does not name {expected:?}:\n{error}");
    }
}

#[test]
fn one_value_turns_traces_on_with_the_standard_variables_and_none_means_none() {
    // In order: a variable refers (`$(POD_NAME)`) only to those before it.
    let env_in_order = |sets: &[&str]| -> Vec<(String, String)> {
        let deployment = documents(&render("ops", sets)).into_iter().find(|d| d["kind"] == "Deployment").unwrap();
        let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
        env.iter()
            .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str().unwrap_or("(from the pod)").to_owned())))
            .collect()
    };
    let env_of = |sets: &[&str]| -> BTreeMap<String, String> { env_in_order(sets).into_iter().collect() };
    let off = env_of(&[]);
    assert!(off.keys().all(|name| !name.starts_with("OTEL_")), "{off:?}");
    let on = env_of(&["tracing.endpoint=http://otel-collector.observability:4318"]);
    assert_eq!(on["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://otel-collector.observability:4318");
    assert_eq!(on["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf");
    assert_eq!(on["OTEL_TRACES_SAMPLER"], "parentbased_always_on");
    assert_eq!(on["OTEL_SERVICE_NAME"], "blockwork");
    assert_eq!(on["OTEL_RESOURCE_ATTRIBUTES"], "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)");
    let names: Vec<String> = env_in_order(&["tracing.endpoint=http://c:4318"]).into_iter().map(|(name, _)| name).collect();
    let at = |wanted: &str| names.iter().position(|n| n == wanted).unwrap_or(usize::MAX);
    assert!(at("POD_NAME") < at("OTEL_RESOURCE_ATTRIBUTES") && at("POD_NAMESPACE") < at("OTEL_RESOURCE_ATTRIBUTES"), "{names:?}");
    let sampled = env_of(&[
        "tracing.endpoint=http://c:4317",
        "tracing.protocol=grpc",
        "tracing.sampler=parentbased_traceidratio",
        "tracing.samplerArg=0.1",
        "tracing.resourceAttributes=deployment.environment=prod",
    ]);
    assert_eq!((sampled["OTEL_EXPORTER_OTLP_PROTOCOL"].as_str(), sampled["OTEL_TRACES_SAMPLER_ARG"].as_str()), ("grpc", "0.1"));
    assert!(sampled["OTEL_RESOURCE_ATTRIBUTES"].ends_with(",deployment.environment=prod"), "{sampled:?}");
}

/// Helm reads numbers as floats and writes `10` for `10.0`: the same number to the API server.
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), numbers_as_floats(v))).collect()),
        other => other.clone(),
    }
}

#[test]
fn the_chart_installs_the_crds_the_code_generates_pointed_at_its_service() {
    let rendered = documents(&render("ops", &["controllers.cert.enabled=true", ZONES[0], ZONES[1], "controllers.tenant.enabled=true"]));
    let crds = of_kind(&rendered, "CustomResourceDefinition");
    let generated = blockwork(&["crds", "--webhook-service-namespace", "ops", "--webhook-service-name", "t-blockwork-webhook"]);
    let generated = documents(&generated);
    assert_eq!(crds.len(), generated.len());
    for crd in crds {
        let want = generated.iter().find(|g| g["metadata"]["name"] == crd["metadata"]["name"]).unwrap();
        assert_eq!(numbers_as_floats(&crd["spec"]), numbers_as_floats(&want["spec"]), "{}", crd["metadata"]["name"]);
        assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    }
}

/// Stand-ins for the Prometheus Operator's and cert-manager's CRDs, which this machine cannot
/// fetch: they accept any spec, so those objects are checked for kind, names and metadata only
/// (their content is checked by the tests above and below).
fn stand_in_crds() -> String {
    [("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"), ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"), ("cert-manager.io", "Issuer", "issuers"), ("cert-manager.io", "Certificate", "certificates")]
        .iter()
        .map(|(group, kind, plural)| {
            format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}, listKind: {kind}List, singular: {}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
                plural.trim_end_matches('s')
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test]
async fn every_rendered_option_is_accepted_by_the_api_server() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let kubeconfig = plane.kubeconfig_path().to_path_buf();
    let kubectl = |args: &[&str], stdin: &str| blockwork_testenv::commands::kubectl(&kubeconfig, args, stdin.as_bytes()).unwrap();
    let applied = kubectl(&["apply", "--server-side", "-f", "-"], &stand_in_crds());
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let waited = kubectl(&["wait", "--for", "condition=established", "--timeout", "60s", "crd", "--all"], "");
    assert!(waited.status.success(), "{}", text(&waited.stderr));

    let all = ["controllers.cert.enabled=true", ZONES[0], ZONES[1], "controllers.tenant.enabled=true"];
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        all.iter()
            .copied()
            .chain([
                "webhook.certificates.mode=cert-manager",
                "metrics.serviceMonitor.enabled=true",
                "metrics.prometheusRule.enabled=true",
                "metrics.dashboard.enabled=true",
                "aws.roleArn=arn:aws:iam::111122223333:role/blockwork",
                "aws.region=eu-west-1",
                "tracing.endpoint=http://otel-collector.observability:4318",
                "tracing.sampler=parentbased_traceidratio",
                "tracing.samplerArg=0.25",
            ])
            .collect(),
        all.iter()
            .copied()
            .chain([
                "namespaces={NS1,NS2}",
                "controllers.cert.exportSecrets=true",
                "webhook.certificates.mode=cert-manager",
                "webhook.certificates.certManager.issuerRef.kind=ClusterIssuer",
                "webhook.certificates.certManager.issuerRef.name=ca",
            ])
            .collect(),
        all.iter()
            .copied()
            .chain([
                "replicaCount=1",
                "leaderElection.enabled=false",
                "webhook.failClosed=false",
                "crds.enabled=false",
                "crds.keep=false",
                "podDisruptionBudget.enabled=false",
                "serviceAccount.create=false",
                "serviceAccount.name=existing",
            ])
            .collect(),
        vec![
            "controllers.cache.registry=mirror.example.com:5000",
            "controllers.cache.images.redis.repository=library/redis",
            "controllers.cache.images.valkey.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "controllers.cache.imagePullPolicy=IfNotPresent",
            "controllers.cache.imagePullSecrets[0].name=mirror",
            "controllers.cache.cpuRequest=250m",
            "controllers.cache.cpuLimit=2",
            "controllers.cache.nodeSpread=required",
            "controllers.cache.runAsUser=1001",
            "controllers.cache.exporter.enabled=true",
            "controllers.cache.exporter.scrapedFrom.namespace=monitoring",
            "controllers.cache.exporter.scrapedFrom.labels.app\\.kubernetes\\.io/name=prometheus",
            "controllers.cache.exporter.scrapedFrom.labels.prometheus=k8s",
            "metrics.serviceMonitor.enabled=true",
        ],
        vec!["controllers.cache.networkPolicies=false"],
        vec![
            "controllers.cache.enabled=false",
            "metrics.port=0",
            "metrics.service.enabled=false",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "extraArgs={--log-level=debug}",
        ],
    ];
    let client = plane.client();
    for sets in cases {
        let release = plane.namespace("chart").await.unwrap();
        let label = |name: String| {
            let labels = [
                ("pod-security.kubernetes.io/warn".to_owned(), "restricted".to_owned()),
                ("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned()),
            ];
            Namespace {
                metadata: ObjectMeta { name: Some(name), labels: Some(labels.into()), ..ObjectMeta::default() },
                ..Namespace::default()
            }
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut patched = namespaces.get(&release).await.unwrap();
        patched.metadata.labels = label(release.clone()).metadata.labels;
        namespaces.replace(&release, &PostParams::default(), &patched).await.unwrap();
        let watched = [format!("{release}-a"), format!("{release}-b")];
        for name in &watched {
            namespaces.create(&PostParams::default(), &label(name.clone())).await.unwrap();
        }
        let sets: Vec<String> = sets.iter().map(|s| s.replace("NS1", &watched[0]).replace("NS2", &watched[1])).collect();
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let rendered = render(&release, &sets);
        let applied = kubectl(&["apply", "--server-side", "--dry-run=server", "--field-manager", "helm", "-f", "-"], &rendered);
        let stderr = text(&applied.stderr);
        assert!(applied.status.success(), "the API server refused the chart rendered with {sets:?}:\n{stderr}");
        assert!(!stderr.contains("would violate PodSecurity"), "{sets:?} violates the restricted Pod Security Standard:\n{stderr}");
        let kinds = text(&applied.stdout);
        assert!(kinds.contains("deployment.apps/t-blockwork serverside-applied (server dry run)"), "{sets:?}: {kinds}");
    }
    // The Pod Security check above can fail: a privileged setting is reported.
    let release = plane.namespace("chart-pss").await.unwrap();
    let relabeled = kubectl(&["label", "namespace", &release, "pod-security.kubernetes.io/warn=restricted"], "");
    assert!(relabeled.status.success(), "{}", text(&relabeled.stderr));
    let rendered = render(&release, &["securityContext.allowPrivilegeEscalation=true"]);
    let applied = kubectl(&["apply", "--server-side", "--dry-run=server", "--field-manager", "helm", "-f", "-"], &rendered);
    assert!(text(&applied.stderr).contains("would violate PodSecurity"), "{}", text(&applied.stderr));
}

/// Every series the binary exports, by sample name, with the label names each carries: the
/// registry `blockwork run` builds (`blockwork::run::register_metrics`), every metric touched
/// once so that each family has a series.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    use std::time::Duration;
    let controllers = blockwork::controllers::registered();
    let metrics = blockwork::run::register_metrics(&controllers, Some("me".to_owned()));
    metrics.status.set_leader(true);
    metrics.runtime.reconciled("cache", "success", Duration::from_millis(5));
    metrics.runtime.external_call("cert", "verify", "success", Duration::from_millis(5));
    metrics.runtime.object_state("cache", "u1", Some(blockwork_runtime::ReconcileState::Succeeded));
    {
        use blockwork_aws::{ErrorClass, Seed, Service};
        let aws = &metrics.aws;
        aws.call(&[Seed::Cert], "operator", Service::Acm, "DescribeCertificate", Ok(()), Duration::from_millis(5));
        aws.call(&[Seed::Cert], "operator", Service::Acm, "RequestCertificate", Err(ErrorClass::Throttled), Duration::from_millis(5));
        aws.call(&[Seed::Tenant], "operator", Service::CloudFront, "GetDistributionTenant", Ok(()), Duration::from_millis(5));
        aws.limiter_wait(&[Seed::Cert], Service::Acm, Duration::from_millis(1));
        aws.limiter_tokens(Service::Acm, "DescribeCertificate", 8.0);
        aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::DESCRIBE_CACHE, true);
        aws.cache_lookup(&[Seed::Cert], blockwork_aws::metrics::DESCRIBE_CACHE, false);
    }
    // Each controller's own metrics, registered as its `start` registers them (unprefixed, in
    // the sub-registry of its `metrics_prefix`) and touched; the binary's registry must declare
    // the same families.
    let mut own = prometheus_client::registry::Registry::default();
    for controller in &controllers {
        let registry = own.sub_registry_with_prefix(controller.metrics_prefix);
        match controller.name {
            "cert" => {
                let cert = blockwork_cert::CertMetrics::register(registry);
                cert.set_tracking_limits(90, 1);
                cert.certificate("u1", "ns", "a", blockwork_cert::CertState::Ready, Some(5.0));
                cert.certificate("u2", "ns", "b", blockwork_cert::CertState::Ready, Some(6.0));
                cert.reconciled(blockwork_cert::CertState::Ready, true, Duration::from_millis(5));
                cert.export.exported("first");
                cert.export.failed("SecretConflict");
            }
            "tenant" => {
                let tenant = blockwork_tenant::TenantMetrics::register(registry);
                tenant.error("throttling");
                tenant.drift();
                tenant.count_from(|| {
                    let mut one = blockwork_tenant::DistributionTenant::new("t", Default::default());
                    one.metadata.namespace = Some("ns".to_owned());
                    vec![Arc::new(one)]
                });
            }
            "rotator" => {
                let rotator = blockwork_rotator::Metrics::register(registry);
                rotator.set_max_tracked_targets(1);
                rotator.reconciled("rotated");
                rotator.error("invalid-source");
                rotator.rotated("ns", "a", 1.0);
                rotator.rotated("ns", "b", 2.0);
            }
            "cache" => blockwork_cache::metrics::CacheMetrics::register(registry).failover("ns", "c"),
            // The AwsIdentity status keeper has no metrics of its own: its AWS calls are the layer's.
            "aws_identity" => {}
            other => panic!("controller `{other}` is new: touch its metrics here so the dashboard test sees them"),
        }
    }
    // A family shows only once it has a series, so the binary's registry shows the controllers'
    // metrics without labels: each must be there, under the same name.
    let mut exported = blockwork_testenv::promql::exported(&metrics.registry).unwrap();
    let touched = blockwork_testenv::promql::exported(&own).unwrap();
    let unlabelled: Vec<&String> = touched.iter().filter(|(_, labels)| labels.is_empty()).map(|(name, _)| name).collect();
    let missing: Vec<&&String> = unlabelled.iter().filter(|name| !exported.contains_key(**name)).collect();
    assert!(missing.is_empty(), "controller metrics `blockwork run` does not register: {missing:?}");
    for (name, labels) in touched {
        exported.entry(name).or_default().extend(labels);
    }
    exported
}

/// The prefixes of the metrics of the exporters beside the Cache servers.
const EXPORTERS: [&str; 2] = ["redis_", "memcached_"];

/// Parses `expr` (Grafana's `$__rate_interval` and `$__range` read as durations, `$job` as a
/// regex) and checks every metric it reads, and every label it matches on, is exported.
fn check_expression(expr: &str, exported: &BTreeMap<String, BTreeSet<String>>) -> Result<(), String> {
    let promql = expr.replace("$__rate_interval", "5m").replace("$__range", "6h").replace("$job", ".*");
    let selectors = blockwork_testenv::promql::selectors(&promql)?;
    if selectors.is_empty() {
        return Err(format!("{expr:?} reads no metric"));
    }
    for selector in selectors {
        let name = selector.name.clone().ok_or_else(|| format!("{expr:?}: a selector without a metric name"))?;
        if EXPORTERS.iter().any(|prefix| name.starts_with(prefix)) {
            // The Cache pods' exporters serve these, not the binary: the e2e suite scrapes them and
            // checks that every one the dashboard reads is there
            // (crates/e2e/tests/e2e/cache_pods.rs, exporter_serves_the_dashboard).
            continue;
        }
        let labels = exported.get(&name).ok_or_else(|| format!("{expr:?} reads {name}, which the binary does not export"))?;
        for matcher in &selector.matchers.matchers {
            // `job` (and `pod`, `namespace` of the target) come from Prometheus' scrape, not the binary.
            if !["job", "instance", "pod"].contains(&matcher.name.as_str()) && !labels.contains(&matcher.name) {
                return Err(format!("{expr:?}: {name} has no label {}", matcher.name));
            }
        }
    }
    Ok(())
}

#[test]
fn dashboard_and_alert_expressions_parse_and_name_only_exported_metrics() {
    let exported = exported();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("files/dashboards/blockwork.json")).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut expressions: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(expressions.len() > 20, "{} dashboard expressions", expressions.len());
    let rules = documents(&render("ops", &["controllers.cert.enabled=true", ZONES[0], ZONES[1], "metrics.prometheusRule.enabled=true"]));
    let rule = of_kind(&rules, "PrometheusRule");
    assert_eq!(rule.len(), 1, "the chart renders the shipped alerts");
    for group in rule[0]["spec"]["groups"].as_array().unwrap() {
        expressions.extend(group["rules"].as_array().unwrap().iter().map(|r| r["expr"].as_str().unwrap().to_owned()));
    }
    let errors: Vec<String> = expressions.iter().filter_map(|e| check_expression(e, &exported).err()).collect();
    assert!(errors.is_empty(), "{errors:#?}\nexported: {:#?}", exported.keys().collect::<Vec<_>>());
    // Every controller has a row.
    let titles: Vec<&str> = panels.iter().filter(|p| p["type"] == "row").map(|p| p["title"].as_str().unwrap()).collect();
    for controller in blockwork::controllers::names() {
        assert!(
            titles.iter().any(|t| t.to_lowercase().contains(controller)
                || (controller == "tenant" && t.contains("DistributionTenant"))
                || (controller == "rotator" && t.contains("rotator"))),
            "no dashboard row for `{controller}`: {titles:?}"
        );
    }
}

#[test]
fn a_broken_expression_or_unknown_metric_is_caught() {
    let exported = exported();
    assert!(check_expression("rate(blockwork_reconciles_total[5m]", &exported).is_err());
    assert!(check_expression("rate(blockwork_no_such_metric_total[5m])", &exported).is_err());
    assert!(check_expression("blockwork_reconciles_total{no_such_label=\"x\"}", &exported).is_err());
    assert!(check_expression("sum(rate(blockwork_reconciles_total{job=~\"$job\"}[$__rate_interval]))", &exported).is_ok());
}

#[tokio::test]
async fn helm_install_against_the_api_server_prints_how_to_check_the_install() {
    let plane = blockwork_testenv::control_plane::control_plane().await.unwrap();
    let namespace = plane.namespace("chart-install").await.unwrap();
    let chart = chart();
    let args = ["install", "blockwork", chart.to_str().unwrap(), "--namespace", &namespace, "--dry-run=server"];
    let out = helm(&args, &[("KUBECONFIG", plane.kubeconfig_path())]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let notes = stdout.split("NOTES:").nth(1).unwrap_or_else(|| panic!("no NOTES:\n{stdout}"));
    assert!(notes.contains(&format!("kubectl -n {namespace} rollout status deployment/blockwork")), "{notes}");
    assert!(notes.contains("Controllers: cache, rotator"), "{notes}");
    assert!(notes.contains("get secret blockwork-webhook-tls"), "{notes}");
}
