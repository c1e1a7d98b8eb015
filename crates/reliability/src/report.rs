//! What a suite reports: its figures (printed as a table for `docs/reliability.md`) and every
//! violation of what it checks. A suite passes when it has no violation.

use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub suite: String,
    pub seed: u64,
    pub figures: Vec<(String, String)>,
    pub violations: Vec<String>,
}

impl Report {
    pub fn new(suite: &str, seed: u64) -> Self {
        println!("{suite}: seed {seed} (BLOCKWORK_SEED={seed} repeats this run's plan, faults and kills)");
        Self { suite: suite.to_owned(), seed, ..Self::default() }
    }

    pub fn figure(&mut self, name: &str, value: impl ToString) {
        self.figures.push((name.to_owned(), value.to_string()));
    }

    /// Records `problem` as a violation unless `ok`.
    pub fn expect(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            self.violations.push(problem());
        }
    }

    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// A two-column Markdown table of the figures, then the violations (or "none").
    pub fn markdown(&self) -> String {
        let mut text = format!("| {} (seed {}) | |\n|---|---|\n", self.suite, self.seed);
        for (name, value) in &self.figures {
            let _ = writeln!(text, "| {name} | {value} |");
        }
        let _ = writeln!(text, "| violations | {} |", self.violations.len());
        for violation in &self.violations {
            let _ = writeln!(text, "\n- {violation}");
        }
        text
    }
}

/// `12.3 s`
pub fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// The seed of a run: `BLOCKWORK_SEED` if set (to repeat a run), else a random one.
pub fn seed() -> u64 {
    std::env::var("BLOCKWORK_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or_else(rand::random)
}
