//! What a process uses, read from Linux's `/proc`: for benchmarks that run the operator in a
//! child process.

use std::io;
use std::process::{Child, Command};

/// A child process a benchmark measures (the operator, typically the bench binary itself in a
/// `--child` mode); killed when dropped.
#[derive(Debug)]
pub struct MeasuredChild(Child);

impl MeasuredChild {
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        command.spawn().map(Self)
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn memory(&self) -> io::Result<(u64, u64)> {
        memory_kib(self.0.id())
    }

    /// User + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> io::Result<f64> {
        cpu_seconds(self.0.id())
    }

    /// Kills the child and waits for it.
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for MeasuredChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (VmRSS, VmHWM) of `pid` in KiB: resident memory now, and its peak.
pub fn memory_kib(pid: u32) -> io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> io::Result<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {name} in /proc/{pid}/status")))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU seconds of `pid` so far.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, format!("unexpected /proc/{pid}/stat"));
    // The command name (field 2) may contain spaces: count fields after its closing parenthesis.
    let after = stat.rfind(')').and_then(|end| stat.get(end + 2..)).ok_or_else(invalid)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).ok_or_else(invalid);
    // utime and stime, in clock ticks of 1/100 s (USER_HZ on Linux).
    Ok((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// `kib` as MiB with one decimal, for tables.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu_time() {
        let (rss, peak) = memory_kib(std::process::id()).expect("readable");
        assert!(rss > 0 && peak >= rss, "{rss} {peak}");
        assert!(cpu_seconds(std::process::id()).expect("readable") >= 0.0);
    }

    #[test]
    fn mib_has_one_decimal() {
        assert_eq!(mib(1536), "1.5 MiB");
    }
}
