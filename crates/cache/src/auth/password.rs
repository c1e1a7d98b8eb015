//! A password, kept out of every text a person reads: its `Debug` and `Display` say only that it
//! is one, and its memory is wiped when it is dropped. What may leave the process is its SHA-256
//! (the form the servers' ACL files take) or the password itself where it must go: the Secrets
//! and the connections that authenticate.

use rand::Rng as _;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Generated passwords have this many characters of `[A-Za-z0-9]`: about 190 bits.
pub const GENERATED_LENGTH: usize = 32;
/// What a password from the user's Secret may be: long enough to resist guessing over the
/// network, short enough for every client, and free of what the servers' files and the
/// memcached authentication command split on (spaces, `:` is fine: memcached splits at the first).
pub const MIN_LENGTH: usize = 8;
pub const MAX_LENGTH: usize = 256;

#[derive(Clone, PartialEq, Eq)]
pub struct Password(Zeroizing<String>);

impl Password {
    /// A new random password.
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        Self(Zeroizing::new((0..GENERATED_LENGTH).map(|_| char::from(rng.sample(rand::distr::Alphanumeric))).collect()))
    }

    /// A password as read from a Secret: `MIN_LENGTH` to `MAX_LENGTH` printable ASCII characters
    /// without spaces. The error says what is wrong, never the value.
    pub fn parse(bytes: &[u8]) -> Result<Self, InvalidPassword> {
        if !(MIN_LENGTH..=MAX_LENGTH).contains(&bytes.len()) {
            return Err(InvalidPassword::Length(bytes.len()));
        }
        if !bytes.iter().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidPassword::Characters);
        }
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| InvalidPassword::Characters)?;
        Ok(Self(Zeroizing::new(text)))
    }

    /// The password itself, for the Secrets and connections that need it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its SHA-256 in hex: how Redis' and Valkey's ACL files and `ACL GETUSER` name a password.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(…)")
    }
}

/// Why a password from the user's Secret cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPassword {
    #[error("it has {0} characters; a password has {MIN_LENGTH} to {MAX_LENGTH}")]
    Length(usize),
    #[error("it has a space or a character that is not printable ASCII")]
    Characters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_password_is_long_and_different_each_time() {
        let (a, b) = (Password::generate(), Password::generate());
        assert_eq!(a.expose().len(), GENERATED_LENGTH);
        assert!(a.expose().chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    #[test]
    fn debug_never_shows_the_password() {
        let password = Password::parse(b"s3cret-value").expect("valid");
        assert_eq!(format!("{password:?}"), "Password(…)");
        assert!(!format!("{:?}", Some(&password)).contains("s3cret"));
    }

    #[test]
    fn the_hash_is_what_redis_acl_files_name() {
        // `ACL GETUSER` of a user created with `>s3cret-value` lists this hash.
        let password = Password::parse(b"s3cret-value").expect("valid");
        assert_eq!(password.sha256(), hex::encode(Sha256::digest(b"s3cret-value")));
        assert_eq!(password.sha256().len(), 64);
    }

    #[test]
    fn a_password_from_a_secret_is_checked_without_repeating_it() {
        assert_eq!(Password::parse(b"short"), Err(InvalidPassword::Length(5)));
        assert_eq!(Password::parse(b"has a space"), Err(InvalidPassword::Characters));
        assert_eq!(Password::parse(b"line\nbreak!"), Err(InvalidPassword::Characters));
        assert_eq!(Password::parse(&[b'x'; 257]), Err(InvalidPassword::Length(257)));
        assert!(!InvalidPassword::Characters.to_string().contains("space!"));
        assert!(Password::parse(b"user:with:colons").is_ok());
    }
}
