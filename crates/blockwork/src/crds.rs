//! `blockwork crds`: the CRDs of every registered controller, generated from the Rust types.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::controllers::Controller;
use crate::webhooks::{Endpoint, point_conversions};

/// The CRDs of `controllers`, sorted by name, each once. Two controllers may share a CRD, but
/// then both must generate the same one.
pub fn collect(controllers: &[Controller]) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut by_name: BTreeMap<String, CustomResourceDefinition> = BTreeMap::new();
    for controller in controllers {
        for crd in (controller.crds)() {
            let name = crd.metadata.name.clone().with_context(|| format!("a CRD of controller `{}` has no name", controller.name))?;
            match by_name.get(&name) {
                Some(existing) if *existing != crd => {
                    bail!("controller `{}` generates CRD `{name}` differently from another controller", controller.name)
                }
                Some(_) => {}
                None => {
                    by_name.insert(name, crd);
                }
            }
        }
    }
    Ok(by_name.into_values().collect())
}

/// All CRDs as one multi-document YAML stream (`---` between documents); empty for none.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> anyhow::Result<String> {
    serde_saphyr::to_string_multiple(crds).context("serializing CRDs to YAML")
}

/// Prints all CRDs to stdout, or writes `<dir>/<crd name>.yaml` for each, with their conversion
/// webhooks pointed at `endpoint`.
pub fn run(controllers: &[Controller], output_dir: Option<&Path>, endpoint: &Endpoint) -> anyhow::Result<()> {
    let mut crds = collect(controllers)?;
    point_conversions(&mut crds, endpoint);
    match output_dir {
        None => {
            let yaml = to_yaml(&crds)?;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(yaml.as_bytes()).and_then(|()| stdout.flush()).context("writing to stdout")
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in &crds {
                let name = crd.metadata.name.as_deref().unwrap_or_default();
                let path = dir.join(format!("{name}.yaml"));
                let yaml = serde_saphyr::to_string(crd).with_context(|| format!("serializing CRD {name} to YAML"))?;
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn crd(name: &str, group: &str) -> CustomResourceDefinition {
        CustomResourceDefinition {
            metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
            spec: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionSpec {
                group: group.to_owned(),
                ..Default::default()
            },
            status: None,
        }
    }

    fn controller(name: &'static str, crds: fn() -> Vec<CustomResourceDefinition>) -> Controller {
        Controller {
            name,
            crds,
            rbac: Vec::new,
            opt_in_rbac: &[],
            webhooks: crate::controllers::Webhooks::NONE,
            metrics_prefix: "blockwork_test",
            start: |_| crate::controllers::runnable(|_| async { Ok(()) }),
        }
    }

    #[test]
    fn no_controllers_means_no_output() {
        let crds = collect(&[]).expect("collects");
        assert!(crds.is_empty());
        assert_eq!(to_yaml(&crds).expect("serializes"), "");
    }

    #[test]
    fn crds_are_sorted_deduplicated_and_separated() {
        let controllers = [
            controller("b", || vec![crd("widgets.example.com", "example.com"), crd("shared.example.com", "example.com")]),
            controller("a", || vec![crd("gadgets.example.com", "example.com"), crd("shared.example.com", "example.com")]),
        ];
        let crds = collect(&controllers).expect("collects");
        let names: Vec<_> = crds.iter().filter_map(|c| c.metadata.name.as_deref()).collect();
        assert_eq!(names, ["gadgets.example.com", "shared.example.com", "widgets.example.com"]);
        let yaml = to_yaml(&crds).expect("serializes");
        assert_eq!(yaml.matches("\n---\n").count(), 2, "{yaml}");
        assert!(yaml.contains("name: gadgets.example.com"), "{yaml}");
    }

    #[test]
    fn conflicting_definitions_of_one_crd_are_rejected() {
        let controllers = [
            controller("a", || vec![crd("shared.example.com", "example.com")]),
            controller("b", || vec![crd("shared.example.com", "other.example.com")]),
        ];
        let err = collect(&controllers).expect_err("conflict");
        assert!(err.to_string().contains("shared.example.com"), "{err}");
    }

    #[test]
    fn output_dir_gets_one_file_per_crd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controllers = [controller("a", || vec![crd("gadgets.example.com", "example.com")])];
        run(&controllers, Some(dir.path()), &Endpoint::Service { namespace: "ns".into(), name: "hooks".into() }).expect("writes");
        let text = std::fs::read_to_string(dir.path().join("gadgets.example.com.yaml")).expect("file");
        assert!(text.contains("group: example.com"), "{text}");
    }
}
