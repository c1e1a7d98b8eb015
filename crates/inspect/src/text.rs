//! Times in the few words a person reads at a glance.

use jiff::Timestamp;

/// A duration as `45s`, `43m`, `2h5m`, `3d4h`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => match (s % 3600) / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h{m}m", s / 3600),
        },
        _ => match (s % 86_400) / 3600 {
            0 => format!("{}d", s / 86_400),
            h => format!("{}d{h}h", s / 86_400),
        },
    }
}

/// How long ago `then` was (`0s` for the future).
pub fn age(then: Timestamp, now: Timestamp) -> String {
    duration(now.duration_since(then).as_secs())
}

/// `in 52s` or `3m ago`.
pub fn ago_or_in(at: Timestamp, now: Timestamp) -> String {
    match at.duration_since(now).as_secs() {
        0 => "now".to_owned(),
        seconds if seconds > 0 => format!("in {}", duration(seconds)),
        seconds => format!("{} ago", duration(-seconds)),
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max && line.len() == text.len() {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(43 * 60 + 10), "43m");
        assert_eq!(duration(2 * 3600 + 5 * 60), "2h5m");
        assert_eq!(duration(3 * 3600), "3h");
        assert_eq!(duration(3 * 86_400 + 4 * 3600), "3d4h");
        assert_eq!(duration(-5), "0s");
    }

    #[test]
    fn a_time_is_ahead_or_behind() {
        let now = Timestamp::from_second(10_000).expect("valid");
        assert_eq!(ago_or_in(Timestamp::from_second(10_052).expect("valid"), now), "in 52s");
        assert_eq!(ago_or_in(Timestamp::from_second(9_820).expect("valid"), now), "3m ago");
        assert_eq!(ago_or_in(now, now), "now");
    }

    #[test]
    fn long_text_is_cut_with_an_ellipsis() {
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(short("abc", 4), "abc");
        assert_eq!(short("one\ntwo", 10), "one…");
    }
}
