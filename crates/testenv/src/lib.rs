//! Blockwork's test environment, in the spirit of controller-runtime's envtest: real upstream
//! processes on loopback, started once per test binary and killed when it exits (under
//! cargo-nextest, where each test is a process, kept for the binary's test processes by a keeper
//! that goes with the last of them: [`shared`]).
//!
//! - [`control_plane`]: a real kube-apiserver and etcd, Blockwork's CRDs installed, one
//!   namespace per test.
//! - [`emulators`]: the moto AWS emulator (ACM, Route53, STS, CloudFront) and MiniStack (the
//!   CloudFront tenant APIs moto lacks).
//! - Services reach local processes: the API server's webhook and conversion calls go through
//!   an egress proxy (`ControlPlane::route_service`).
//! - [`collector`]: a real trace collector (Jaeger, OTLP in, its query API out) and the span
//!   trees Blockwork exports, read back from it.
//! - [`clusters`]: "two clusters": a second control plane and a `blockwork run` for each,
//!   against the same emulators behind one fault proxy, and the same namespace in both.
//! - [`fault_proxy`]: an HTTP proxy between the AWS SDK and an emulator that answers chosen
//!   calls with real AWS errors, latency (before or after the call takes effect) or PENDING
//!   changes.
//! - [`kube_proxy`]: an HTTP proxy in front of kube-apiserver that cuts watches, answers 429,
//!   5xx and 410, and records every write by field manager; a client through it.
//! - [`throttle`]: AWS's token buckets, which the fault proxy enforces on request.
//! - [`costs`]: AWS calls, Kubernetes writes and reconciles each scenario of a test costs, as a
//!   table.
//! - [`measure`]: memory and CPU of a process, for benchmarks.
//! - [`promql`]: the series a registry exports and the selectors an alert or dashboard reads.
//! - [`leaks`]: looks for account ids (or any secret) in statuses, events, logs and metrics.
//! - [`harness`]: what each controller's tests share: a namespace of the test's own, the
//!   controller as a task (start, crash, restart), `eventually` and typed waits.
//! - [`aws`]: SDK clients straight to the emulators, hosted zones, CNAMEs, certificates, a
//!   tenant-only distribution, and the AWS layer's configuration for a controller under test.
//! - [`commands`]: `kubectl` with stdin, and the workspace's `blockwork` binary.
//! - [`operator`]: `blockwork run` as a child process: its servers on free ports, webhooks with
//!   a certificate from a directory, waits for listening, ready and leading, its log, `kill -9`
//!   and restarts, named replicas.
//!
//! The binaries come from `scripts/install-test-tools`, found in `$BLOCKWORK_TOOLS_DIR`
//! (default `~/.cache/blockwork-tools`).

pub mod accounts;
pub mod aws;
pub mod clusters;
pub mod collector;
pub mod commands;
pub mod control_plane;
pub mod costs;
mod egress;
pub mod emulators;
pub mod fault_proxy;
pub mod harness;
pub mod issuance;
pub mod kube_proxy;
pub mod leaks;
pub mod measure;
pub mod operator;
mod process;
pub mod promql;
pub mod shared;
pub mod throttle;
mod tools;
