//! The error a reconcile ends with when Kubernetes, not the external resource, is in the way
//! (an operator's own failures are `outcome::ExternalError`).

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object has no {0}")]
    MissingMetadata(&'static str),
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize the object: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("the reconcile panicked: {0}")]
    Panicked(String),
}

impl Error {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingMetadata(_) => "invalid_object",
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kubernetes",
            Self::Serialize(_) => "serialization",
            Self::Panicked(_) => "panicked",
        }
    }
}
