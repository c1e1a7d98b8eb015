//! IDNA2008's code point rules (RFC 5892) for the U-label an A-label decodes to.
//!
//! The `idna` crate implements UTS #46, the browsers' processing, which accepts code points
//! IDNA2008 disallows: symbols and emoji (`xn--n3h` is ☃, U+2603), most punctuation. IDNA2008 is
//! the standard for what an internationalized label may hold (registries register nothing
//! else), so Blockwork holds A-labels to it before a certificate is requested for them. No
//! maintained crate computes IDNA2008's derived property, so [`derived`] follows RFC 5892 §3
//! over the Unicode properties of `icu_properties` (the same data `idna` uses); the only tables
//! here are the RFC's own: its exceptions (§2.6) and three blocks (§2.4). ADR 0019 says why.

use icu_properties::props::{
    ChangesWhenNfkcCasefolded, DefaultIgnorableCodePoint, GeneralCategory, HangulSyllableType, JoinControl, NoncharacterCodePoint, Script,
    WhiteSpace,
};
use icu_properties::{CodePointMapData, CodePointSetData, CodePointSetDataBorrowed};

/// RFC 5892's derived property of a code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Derived {
    /// Allowed anywhere in a U-label.
    Pvalid,
    /// A joiner (ZWJ, ZWNJ): allowed where RFC 5892 Appendix A.1-A.2 say (UTS #46's
    /// CheckJoiners, which `idna` applies, is the same rule).
    ContextJ,
    /// Allowed where its rule of RFC 5892 Appendix A.3-A.9 holds ([`context_holds`]).
    ContextO,
    /// Never allowed.
    Disallowed,
    /// Not assigned in the Unicode version of `icu_properties`: not allowed.
    Unassigned,
}

/// Why a U-label is not an IDNA2008 label: the first code point it may not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    pub code_point: char,
    pub derived: Derived,
}

/// Checks every code point of a U-label: PVALID, a joiner (checked by `idna`), or CONTEXTO
/// where its contextual rule holds.
pub fn check_u_label(label: &str) -> Result<(), Refused> {
    let code_points: Vec<char> = label.chars().collect();
    for (at, &code_point) in code_points.iter().enumerate() {
        let derived = derived(code_point);
        let allowed = match derived {
            Derived::Pvalid | Derived::ContextJ => true,
            Derived::ContextO => context_holds(&code_points, at),
            Derived::Disallowed | Derived::Unassigned => false,
        };
        if !allowed {
            return Err(Refused { code_point, derived });
        }
    }
    Ok(())
}

/// RFC 5892 §3: the first of these that applies decides.
pub fn derived(c: char) -> Derived {
    if let Some(exception) = exception(c) {
        return exception;
    }
    // BackwardCompatible (§2.7) is empty: no Unicode version since 5.2 has needed an entry.
    let category = CodePointMapData::<GeneralCategory>::new().get(c);
    let has = |set: CodePointSetDataBorrowed<'static>| set.contains(c);
    if category == GeneralCategory::Unassigned && !has(CodePointSetData::new::<NoncharacterCodePoint>()) {
        return Derived::Unassigned;
    }
    if matches!(c, '-' | '0'..='9' | 'a'..='z') {
        return Derived::Pvalid;
    }
    if has(CodePointSetData::new::<JoinControl>()) {
        return Derived::ContextJ;
    }
    // Unstable (§2.2): changed by NFKC, case folding and NFKC again.
    if has(CodePointSetData::new::<ChangesWhenNfkcCasefolded>()) {
        return Derived::Disallowed;
    }
    // IgnorableProperties (§2.3).
    if has(CodePointSetData::new::<DefaultIgnorableCodePoint>())
        || has(CodePointSetData::new::<WhiteSpace>())
        || has(CodePointSetData::new::<NoncharacterCodePoint>())
    {
        return Derived::Disallowed;
    }
    if IGNORABLE_BLOCKS.iter().any(|block| block.contains(&c)) {
        return Derived::Disallowed;
    }
    // OldHangulJamo (§2.9): conjoining jamo, which compose into syllables.
    let jamo = CodePointMapData::<HangulSyllableType>::new().get(c);
    if [HangulSyllableType::LeadingJamo, HangulSyllableType::VowelJamo, HangulSyllableType::TrailingJamo].contains(&jamo) {
        return Derived::Disallowed;
    }
    // LetterDigits (§2.1).
    use GeneralCategory as Gc;
    match category {
        Gc::LowercaseLetter
        | Gc::UppercaseLetter
        | Gc::OtherLetter
        | Gc::DecimalNumber
        | Gc::ModifierLetter
        | Gc::NonspacingMark
        | Gc::SpacingMark => Derived::Pvalid,
        _ => Derived::Disallowed,
    }
}

/// IgnorableBlocks (§2.4): Combining Diacritical Marks for Symbols, Musical Symbols, Ancient
/// Greek Musical Notation.
const IGNORABLE_BLOCKS: [std::ops::RangeInclusive<char>; 3] =
    ['\u{20D0}'..='\u{20FF}', '\u{1D100}'..='\u{1D1FF}', '\u{1D200}'..='\u{1D24F}'];

const MIDDLE_DOT: char = '\u{00B7}';
const GREEK_KERAIA: char = '\u{0375}';
const HEBREW_GERESH: char = '\u{05F3}';
const HEBREW_GERSHAYIM: char = '\u{05F4}';
const KATAKANA_MIDDLE_DOT: char = '\u{30FB}';
const ARABIC_INDIC_DIGITS: std::ops::RangeInclusive<char> = '\u{0660}'..='\u{0669}';
const EXTENDED_ARABIC_INDIC_DIGITS: std::ops::RangeInclusive<char> = '\u{06F0}'..='\u{06F9}';

/// Exceptions (§2.6): code points whose derived property the RFC sets by hand.
fn exception(c: char) -> Option<Derived> {
    match c {
        '\u{00DF}' | '\u{03C2}' | '\u{06FD}' | '\u{06FE}' | '\u{0F0B}' | '\u{3007}' => Some(Derived::Pvalid),
        MIDDLE_DOT | GREEK_KERAIA | HEBREW_GERESH | HEBREW_GERSHAYIM | KATAKANA_MIDDLE_DOT => Some(Derived::ContextO),
        c if ARABIC_INDIC_DIGITS.contains(&c) || EXTENDED_ARABIC_INDIC_DIGITS.contains(&c) => Some(Derived::ContextO),
        '\u{0640}' | '\u{07FA}' | '\u{302E}' | '\u{302F}' | '\u{3031}'..='\u{3035}' | '\u{303B}' => Some(Derived::Disallowed),
        _ => None,
    }
}

/// RFC 5892 Appendix A.3-A.9: whether the CONTEXTO code point at `at` may stand there.
pub fn context_holds(label: &[char], at: usize) -> bool {
    let script = |c: char| CodePointMapData::<Script>::new().get(c);
    let before = at.checked_sub(1).and_then(|i| label.get(i)).copied();
    let after = label.get(at + 1).copied();
    match label.get(at).copied() {
        // Catalan's l·l.
        Some(MIDDLE_DOT) => before == Some('l') && after == Some('l'),
        Some(GREEK_KERAIA) => after.is_some_and(|c| script(c) == Script::Greek),
        Some(HEBREW_GERESH | HEBREW_GERSHAYIM) => before.is_some_and(|c| script(c) == Script::Hebrew),
        Some(KATAKANA_MIDDLE_DOT) => label.iter().any(|&c| [Script::Hiragana, Script::Katakana, Script::Han].contains(&script(c))),
        // The two series of Arabic-Indic digits look alike: a label takes one of them.
        Some(c) if ARABIC_INDIC_DIGITS.contains(&c) => !label.iter().any(|c| EXTENDED_ARABIC_INDIC_DIGITS.contains(c)),
        Some(c) if EXTENDED_ARABIC_INDIC_DIGITS.contains(&c) => !label.iter().any(|c| ARABIC_INDIC_DIGITS.contains(c)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(label: &str) -> Option<Refused> {
        check_u_label(label).err()
    }

    #[test]
    fn letters_digits_and_marks_of_every_script_are_pvalid() {
        for label in ["bücher", "münchen", "例え", "βόλος", "موقع", "пример", "ß", "ς", "한국", "ไทย", "a-1"] {
            assert_eq!(check_u_label(label), Ok(()), "{label}");
        }
    }

    #[test]
    fn symbols_emoji_and_punctuation_are_disallowed() {
        for (label, code_point) in [("☃", '☃'), ("💩", '💩'), ("a♥b", '♥'), ("i❤", '❤'), ("a!", '!'), ("€", '€')] {
            assert_eq!(refused(label), Some(Refused { code_point, derived: Derived::Disallowed }), "{label}");
        }
    }

    #[test]
    fn what_nfkc_or_case_folding_would_change_is_disallowed() {
        // Capitals, a compatibility ligature, a full-width letter, a superscript digit.
        for c in ['A', 'Ä', 'ﬁ', 'ａ', '²', 'İ'] {
            assert_eq!(derived(c), Derived::Disallowed, "{c:?}");
        }
    }

    #[test]
    fn the_rfcs_exceptions_override_the_derivation() {
        assert_eq!(derived('ß'), Derived::Pvalid, "NFKC with case folding changes it, yet the RFC takes it");
        assert_eq!(derived('\u{0640}'), Derived::Disallowed, "ARABIC TATWEEL is a modifier letter, yet refused");
        assert_eq!(derived(MIDDLE_DOT), Derived::ContextO);
    }

    #[test]
    fn ignorable_code_points_blocks_and_old_jamo_are_disallowed_though_they_are_marks_or_letters() {
        for c in ['\u{FE00}', '\u{3164}', '\u{20D0}', '\u{1D165}', '\u{1100}', ' ', '\u{FDD0}'] {
            assert_eq!(derived(c), Derived::Disallowed, "{c:?}");
        }
    }

    #[test]
    fn joiners_are_contextj_and_unassigned_code_points_are_unassigned() {
        assert_eq!(derived('\u{200D}'), Derived::ContextJ);
        assert_eq!(derived('\u{0378}'), Derived::Unassigned);
        assert_eq!(refused("a\u{0378}"), Some(Refused { code_point: '\u{0378}', derived: Derived::Unassigned }));
    }

    #[test]
    fn a_middle_dot_stands_only_between_two_ls() {
        assert_eq!(check_u_label("col·lecció"), Ok(()));
        assert_eq!(refused("a·b"), Some(Refused { code_point: MIDDLE_DOT, derived: Derived::ContextO }));
        assert!(refused("·l").is_some());
    }

    #[test]
    fn greek_keraia_hebrew_geresh_and_katakana_middle_dot_need_their_script() {
        assert_eq!(check_u_label("͵α"), Ok(()));
        assert!(refused("͵a").is_some());
        assert_eq!(check_u_label("א׳"), Ok(()));
        assert!(refused("a׳").is_some());
        assert_eq!(check_u_label("カ・カ"), Ok(()));
        assert!(refused("a・b").is_some());
    }

    #[test]
    fn a_label_takes_one_of_the_two_arabic_indic_digit_series() {
        assert_eq!(check_u_label("ب١٢"), Ok(()));
        assert_eq!(check_u_label("ب۱۲"), Ok(()));
        assert!(refused("ب١۲").is_some());
    }
}
