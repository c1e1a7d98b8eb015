//! What the unit tests build on: a Cache as a user would first write one.

use crate::api::{Cache, CacheSpec, Engine, EvictionPolicy};

/// `c` in namespace `ns`: 64 MiB, one replica, nothing else set.
pub(crate) fn cache(engine: Engine) -> Cache {
    let mut cache = Cache::new(
        "c",
        CacheSpec {
            engine,
            memory: "64Mi".into(),
            replicas: 1,
            eviction_policy: EvictionPolicy::AllkeysLru,
            access: None,
            tls: None,
            high_availability: None,
            auth: None,
        },
    );
    cache.metadata.namespace = Some("ns".into());
    cache.metadata.uid = Some("uid-1".into());
    cache
}
