//! One finding of `blockwork check`: what was checked, the verdict, what was seen, and the fix.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    Pass,
    /// Works, but not as it should in production.
    Warn,
    Fail,
    /// Not checked, with why.
    Skip,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: String,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do, for anything but a pass.
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn pass(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { check: check.into(), verdict: Verdict::Pass, detail: detail.into(), fix: None }
    }
    pub(crate) fn with(verdict: Verdict, check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { check: check.into(), verdict, detail: detail.into(), fix: Some(fix.into()) }
    }
}
