//! The namespaces a process watches, and the per-namespace fan-out every controller uses.
//!
//! A controller limited to some namespaces runs one watch (or one `kube::runtime::Controller`)
//! per namespace, so that it needs no cluster-wide permissions; without a limit, one
//! cluster-wide watch. [`Namespaces::scopes`] names those watches, [`api`] turns a scope into an
//! `Api`, and [`run_in`] runs one future per scope until all end.

use std::future::Future;

use k8s_openapi::NamespaceResourceScope;
use kube::{Api, Client, Resource};

/// The namespaces the controllers watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    All,
    /// Never empty.
    Only(Vec<String>),
}

/// What one watch covers: one namespace, or (`None`) every namespace.
pub type Scope = Option<String>;

impl Namespaces {
    /// `All` for an empty list (blank entries, e.g. from an empty environment variable, ignored).
    pub fn from_list(namespaces: Vec<String>) -> Self {
        let namespaces: Vec<String> = namespaces.into_iter().map(|ns| ns.trim().to_owned()).filter(|ns| !ns.is_empty()).collect();
        if namespaces.is_empty() { Self::All } else { Self::Only(namespaces) }
    }

    /// One scope per watch: each namespace, or a single cluster-wide one.
    pub fn scopes(&self) -> Vec<Scope> {
        match self {
            Self::All => vec![None],
            Self::Only(namespaces) => namespaces.iter().cloned().map(Some).collect(),
        }
    }
}

/// The `Api` of `K` in `scope`: namespaced, or across all namespaces for `None`.
pub fn api<K>(client: &Client, scope: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match scope {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Runs `run(scope)` for every scope of `namespaces` at once, until all of them end.
pub async fn run_in<F, R>(namespaces: &Namespaces, run: F)
where
    F: FnMut(Scope) -> R,
    R: Future<Output = ()>,
{
    futures::future::join_all(namespaces.scopes().into_iter().map(run)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_from_an_empty_list_is_all() {
        assert_eq!(Namespaces::from_list(vec![]), Namespaces::All);
        assert_eq!(Namespaces::from_list(vec![String::new(), " ".into()]), Namespaces::All);
        assert_eq!(Namespaces::from_list(vec![" a ".into(), String::new()]), Namespaces::Only(vec!["a".into()]));
    }

    #[test]
    fn all_namespaces_is_one_cluster_wide_scope_and_a_list_one_scope_each() {
        assert_eq!(Namespaces::All.scopes(), [None]);
        assert_eq!(Namespaces::Only(vec!["a".into(), "b".into()]).scopes(), [Some("a".to_owned()), Some("b".to_owned())]);
    }

    #[tokio::test]
    async fn run_in_runs_one_future_per_scope() {
        let seen = std::sync::Mutex::new(Vec::new());
        run_in(&Namespaces::Only(vec!["a".into(), "b".into()]), |scope| {
            seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(scope);
            async {}
        })
        .await;
        assert_eq!(seen.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner), [Some("a".to_owned()), Some("b".to_owned())]);
    }
}
