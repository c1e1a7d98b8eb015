//! One backoff per watch, for every controller of the binary on `kube::runtime::Controller`
//! (the runtime's, and the Cache controller's).
//!
//! kube-runtime's `Controller` puts one backoff on all its triggers together (its
//! `trigger_backoff`, over the merged stream of `for_stream`, `owns`, `watches` and
//! `reconcile_on`): while any one of them yields errors, none is read. Under API server trouble
//! the Cache controller's six watches failed in turn, the shared backoff grew to its cap (30 s,
//! up to 60 s with jitter) and never reset, so a changed Cache went unseen for minutes (issue 15,
//! seed 6191853475873919598); a runtime controller's failing watch held back its dependency
//! changes and wake-ups the same way. Each watch therefore has its own backoff (kube's
//! `default_backoff`, before [`on_its_own`]) and its errors are logged and left out of the
//! controller's stream: with no error reaching it, the shared backoff never engages.

use std::borrow::Cow;

use futures::{Stream, StreamExt as _};
use kube::runtime::watcher;
use tracing::warn;

/// `changes` of one watch (already given its own backoff), its errors logged and left out, so
/// no other trigger of the controller waits for it. `controller` and `kind` name it in the log.
pub fn on_its_own<K: Send + 'static>(
    controller: &'static str,
    kind: impl Into<Cow<'static, str>>,
    changes: impl Stream<Item = watcher::Result<K>> + Send + 'static,
) -> impl Stream<Item = watcher::Result<K>> + Send + 'static {
    let kind = kind.into();
    changes.filter_map(move |change| {
        std::future::ready(match change {
            Ok(object) => Some(Ok(object)),
            Err(error) => {
                warn!(controller, %kind, %error, "watch failed; retried after its own backoff");
                None
            }
        })
    })
}
