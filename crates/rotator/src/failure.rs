//! How a source's failure is told, for `blockwork status` and `explain`: a Secret has no status
//! the rotator may write (it writes nothing to the user's Secrets but the target), so the
//! source's Warning event carries the error's class — in the runtime's vocabulary — and when
//! the rotator looks again, at the start of its note (the API server keeps 1 KiB of a note and
//! the publisher cuts the end): `[Retryable, retry in 8s] Could not write target …`.
//!
//! The delay, not a time: a blocked source's note is the same at each look, so the event
//! recorder counts its repeats in one event's series, and the reader adds the delay to when the
//! event was last seen. [`note`] writes it, [`parse`] reads it back; nothing else knows the form.

use std::time::Duration;

use blockwork_runtime::ErrorClass;

/// A failure's class and how long until the rotator retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    pub class: ErrorClass,
    /// Shown in whole seconds, rounded up.
    pub after: Duration,
}

/// The note of a failure event: the retry, then `message`.
pub fn note(retry: Retry, message: &str) -> String {
    let seconds = retry.after.as_secs() + u64::from(retry.after.subsec_nanos() > 0);
    format!("[{}, retry in {seconds}s] {message}", class_name(retry.class))
}

/// The retry and the message of a note [`note`] wrote; `None` for any other note.
pub fn parse(note: &str) -> Option<(Retry, &str)> {
    let (tag, message) = note.strip_prefix('[')?.split_once("] ")?;
    let (class, after) = tag.split_once(", retry in ")?;
    let seconds: u64 = after.strip_suffix('s')?.parse().ok()?;
    Some((Retry { class: class_named(class)?, after: Duration::from_secs(seconds) }, message))
}

/// The class of a Kubernetes API error by its HTTP status (`None`: no answer, e.g. the
/// connection failed): throttled at 429; needing a person for a refusal (RBAC, a quota, an
/// admission webhook, an invalid object); transient for the rest (5xx, the network, a target
/// that changed or went between the read and the write).
pub fn class_of_status(code: Option<u16>) -> ErrorClass {
    match code {
        Some(429) => ErrorClass::Throttled,
        Some(404 | 408 | 409) | None => ErrorClass::Retryable,
        Some(400..=499) => ErrorClass::Terminal,
        Some(_) => ErrorClass::Retryable,
    }
}

/// The class's name as the runtime writes it in status (`lastError.class`): its serde name.
fn class_name(class: ErrorClass) -> String {
    serde_json::to_value(class).ok().and_then(|name| name.as_str().map(str::to_owned)).unwrap_or_default()
}

fn class_named(name: &str) -> Option<ErrorClass> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_note_reads_back_as_its_class_retry_and_message() {
        for class in [ErrorClass::Terminal, ErrorClass::Retryable, ErrorClass::Throttled, ErrorClass::NotFound] {
            let retry = Retry { class, after: Duration::from_secs(300) };
            let written = note(retry, "Could not write target t: [forbidden] no");
            assert_eq!(parse(&written), Some((retry, "Could not write target t: [forbidden] no")), "{written}");
        }
    }

    #[test]
    fn the_note_starts_with_the_class_and_the_delay_so_a_cut_note_keeps_them() {
        let written = note(Retry { class: ErrorClass::Terminal, after: Duration::from_secs(3600) }, &"x".repeat(2000));
        assert!(written.starts_with("[Terminal, retry in 3600s] x"), "{}", &written[..40]);
        let cut = format!("{}...", &written[..1021]);
        assert_eq!(parse(&cut).map(|(retry, _)| retry.after), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn a_part_of_a_second_is_rounded_up_so_the_retry_is_never_shown_early() {
        let written = note(Retry { class: ErrorClass::Retryable, after: Duration::from_millis(2500) }, "m");
        assert_eq!(written, "[Retryable, retry in 3s] m");
        assert_eq!(parse(&written).unwrap().0.after, Duration::from_secs(3));
    }

    #[test]
    fn other_notes_are_not_read_as_a_retry() {
        for other in [
            "Rotated from source s",
            "[Terminal] no delay",
            "[Fatal, retry in 3s] an unknown class",
            "[Terminal, retry in soon] no number",
            "[Retryable, retry in 3s]",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn refusals_need_a_person_and_the_rest_is_transient() {
        assert_eq!(class_of_status(Some(403)), ErrorClass::Terminal, "RBAC or a quota");
        assert_eq!(class_of_status(Some(422)), ErrorClass::Terminal, "an invalid object");
        assert_eq!(class_of_status(Some(429)), ErrorClass::Throttled);
        assert_eq!(class_of_status(Some(500)), ErrorClass::Retryable);
        assert_eq!(class_of_status(Some(404)), ErrorClass::Retryable, "the target went between the read and the write");
        assert_eq!(class_of_status(None), ErrorClass::Retryable, "no answer");
    }
}
