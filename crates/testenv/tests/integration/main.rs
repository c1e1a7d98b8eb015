//! The integration tests of `blockwork-testenv`: one test binary for the crate, one module per concern
//! (see the README's "Tests" for where a new test goes).

mod apiserver_restart;
mod control_plane;
mod emulators;
mod kube_proxy;
