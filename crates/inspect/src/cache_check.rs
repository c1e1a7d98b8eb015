//! `blockwork check`'s Cache probe: the images (and pod settings) the running operator gives
//! every Cache, read from the leader's pod (its `blockwork run` arguments and environment) and
//! parsed as `blockwork run` parses them, so the report is what the Caches get, not what a
//! values file meant.

use clap::{Args, Command, FromArgMatches};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::{Api, Client};

use blockwork_cache::settings::{CacheArgs, Settings};

use crate::finding::{Finding, Verdict};

/// The `--cache-*` arguments of the `blockwork run` container of `pod`: its own `--cache-*`
/// arguments, and its `BLOCKWORK_CACHE_*` environment as the flags they stand for (arguments
/// win, as with clap). `None` when the pod runs no `blockwork run`.
pub fn cache_arguments(pod: &Pod) -> Option<Vec<String>> {
    let container: &Container =
        pod.spec.as_ref()?.containers.iter().find(|c| c.args.as_ref().is_some_and(|a| a.first().is_some_and(|a| a == "run")))?;
    let flags = CacheArgs::augment_args(Command::new("run"));
    let mut arguments: Vec<String> = Vec::new();
    for variable in container.env.iter().flatten() {
        let (Some(value), Some(flag)) =
            (variable.value.as_ref(), flags.get_arguments().find(|a| a.get_env().is_some_and(|e| e == variable.name.as_str())))
        else {
            continue;
        };
        if let Some(long) = flag.get_long() {
            arguments.push(format!("--{long}={value}"));
        }
    }
    arguments.extend(container.args.iter().flatten().filter(|a| a.starts_with("--cache-") && a.contains('=')).cloned());
    Some(arguments)
}

/// The settings `arguments` (from [`cache_arguments`]) give, as `blockwork run` checks them.
pub fn settings(arguments: &[String]) -> Result<Settings, String> {
    let command = CacheArgs::augment_args(Command::new("run").no_binary_name(true));
    // Only the pod's own values: not this process's environment.
    let command = Command::new("run").no_binary_name(true).args(command.get_arguments().map(|a| a.clone().env(None::<&str>)));
    let matches = command.try_get_matches_from(arguments).map_err(|e| e.to_string())?;
    let args = CacheArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    Settings::from_args(&args).map_err(|e| e.to_string())
}

/// What the leader `pod` (named `name`) gives every Cache's pods.
pub fn finding(name: &str, pod: Option<&Pod>) -> Finding {
    let check = format!("Cache pods (leader {name})");
    let Some(arguments) = pod.and_then(cache_arguments) else {
        return Finding {
            check,
            verdict: Verdict::Skip,
            detail: "the leader pod was not found or runs no `blockwork run`".into(),
            fix: Some("run check while the operator runs, with its --leader-election-namespace/-id".into()),
        };
    };
    match settings(&arguments) {
        Ok(settings) => {
            let images: Vec<String> = settings.images().iter().map(|(what, image)| format!("{what} {image}")).collect();
            let mut detail = format!("images {}", images.join(", "));
            if let Some(policy) = settings.image_pull_policy {
                detail.push_str(&format!("; pull policy {}", policy.as_str()));
            }
            if !settings.image_pull_secrets.is_empty() {
                detail.push_str(&format!(
                    "; pull Secrets {} (each must exist in every namespace with a Cache)",
                    settings.image_pull_secrets.join(", ")
                ));
            }
            detail.push_str(if settings.exporter { "; exporter on" } else { "; exporter off" });
            Finding { check, verdict: Verdict::Pass, detail, fix: None }
        }
        Err(error) => Finding {
            check,
            verdict: Verdict::Fail,
            detail: format!("the operator's Cache settings are refused: {error}"),
            fix: Some("correct the value (the chart's controllers.cache.*); the operator does not start with it".into()),
        },
    }
}

/// Reads the pod that holds the leader Lease (`holder` is `<pod>_<id>`) in `namespace`: what its
/// Caches' pods get, and whether their NetworkPolicies are applied and enforced
/// ([`crate::network_check`]).
pub async fn check(client: &Client, namespace: &str, holder: &str) -> Vec<Finding> {
    let name = holder.split('_').next().unwrap_or(holder);
    match Api::<Pod>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(pod) => {
            let mut findings = vec![finding(name, pod.as_ref())];
            let settings = pod.as_ref().and_then(cache_arguments).and_then(|arguments| settings(&arguments).ok());
            if let Some(settings) = settings {
                findings.push(crate::network_check::check(client, settings.network_policies.is_some()).await);
            }
            findings
        }
        Err(error) => vec![Finding {
            check: format!("Cache pods (leader {name})"),
            verdict: Verdict::Skip,
            detail: format!("not tested: the leader pod could not be read ({error})"),
            fix: Some("run check as someone who may read pods in the operator's namespace".into()),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, PodSpec};

    fn pod(args: &[&str], env: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "blockwork".into(),
                    args: Some(args.iter().map(|a| (*a).to_owned()).collect()),
                    env: Some(
                        env.iter().map(|(n, v)| EnvVar { name: (*n).into(), value: Some((*v).into()), ..EnvVar::default() }).collect(),
                    ),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn the_images_are_those_of_the_leader_s_arguments_and_environment() {
        let leader = pod(
            &["run", "--controllers=cache", "--cache-redis-image=mirror.example.com/redis:7.2", "--cache-exporter=true"],
            &[("BLOCKWORK_CACHE_MEMCACHED_IMAGE", "mirror.example.com/memcached:1.6"), ("POD_NAME", "x")],
        );
        let finding = finding("blockwork-0", Some(&leader));
        assert_eq!(finding.verdict, Verdict::Pass, "{finding:?}");
        assert!(finding.detail.contains("redis mirror.example.com/redis:7.2"), "{}", finding.detail);
        assert!(finding.detail.contains("memcached mirror.example.com/memcached:1.6"), "{}", finding.detail);
        assert!(finding.detail.contains("valkey valkey/valkey:8.0") && finding.detail.ends_with("exporter on"), "{}", finding.detail);
    }

    #[test]
    fn settings_the_operator_would_refuse_fail_the_check() {
        let finding = finding("blockwork-0", Some(&pod(&["run", "--cache-valkey-image=Valkey 8"], &[])));
        assert_eq!(finding.verdict, Verdict::Fail);
        assert!(finding.detail.contains("--cache-valkey-image"), "{}", finding.detail);
    }

    #[test]
    fn no_leader_pod_is_skipped_with_why() {
        assert_eq!(finding("gone", None).verdict, Verdict::Skip);
        assert_eq!(finding("other", Some(&pod(&["serve"], &[]))).verdict, Verdict::Skip);
    }
}
