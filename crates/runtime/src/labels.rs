//! The labels Blockwork puts on the Kubernetes objects its controllers create.

use std::collections::BTreeMap;

/// Kubernetes' recommended label for the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// [`MANAGED_BY_LABEL`]'s one value, on every object any Blockwork controller creates (a Cache's
/// StatefulSet, a Cert's published ConfigMap, a rotator's target Secret, the webhook's
/// certificate Secret): `kubectl get all,cm,secrets -l app.kubernetes.io/managed-by=blockwork`
/// lists them. Which controller wrote an object says its owner reference or annotations.
pub const MANAGED_BY: &str = "blockwork";

/// The label selector of the objects Blockwork manages, for watches and lists.
pub fn managed_by_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// Whether `labels` say Blockwork manages the object.
pub fn is_managed(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_matches_what_is_managed_says() {
        let labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())]);
        assert!(is_managed(&labels));
        assert_eq!(managed_by_selector(), "app.kubernetes.io/managed-by=blockwork");
        assert!(!is_managed(&BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), "Helm".to_owned())])));
    }
}
