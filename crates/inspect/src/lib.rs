//! "Why is it stuck?": what `blockwork status`, `explain`, `retry`, `pause`, `resume` and `check`
//! know and print.
//!
//! Pure parts, each unit-tested: [`catalog`] (every reason Blockwork sets, with its meaning and
//! fix), [`kinds`] (a [`report::Report`] per kind from the objects as read), [`diagnose`] (the
//! headline and the hints), [`render`] (the table and the story), [`check`]'s verdicts. The reads
//! ([`read`], [`check`]'s probes) go through the API server and AWS like any client's, never
//! through a controller's memory, and [`actions`] writes only annotations.

pub mod actions;
pub mod aws_check;
pub mod cache_check;
pub mod catalog;
pub mod check;
pub mod commands;
pub mod diagnose;
pub mod finding;
pub mod identity_check;
pub mod import;
pub mod kinds;
pub mod network_check;
pub mod permissions;
pub mod read;
pub mod render;
pub mod report;
pub mod text;
