//! API keys: `ask_` + 40 base62 characters from the OS random source (a test key: `ask_test_` + the
//! same). Only the SHA-256 is stored.

use sha2::{Digest, Sha256};

pub const PREFIX: &str = "ask_";
/// The prefix of a test key (docs/decisions/api.md, "Test mode").
pub const TEST_PREFIX: &str = "ask_test_";
/// Random characters after the prefix (40 × log2(62) ≈ 238 bits).
const RANDOM_CHARS: usize = 40;
/// Characters of the key shown in listings: the prefix and the first 8 random characters.
const DISPLAY_CHARS: usize = PREFIX.len() + 8;

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Uniform base62 characters from the OS random source (rejection sampling, no modulo bias).
pub fn random_base62(n: usize) -> Result<String, getrandom::Error> {
    let mut out = String::with_capacity(n);
    let mut buf = [0u8; 64];
    while out.len() < n {
        getrandom::fill(&mut buf)?;
        for &b in &buf {
            // 248 = 4 × 62: bytes at or above it would bias the first characters.
            if b < 248 && out.len() < n {
                out.push(ALPHABET[(b % 62) as usize] as char);
            }
        }
    }
    Ok(out)
}

/// A new key and its display prefix.
pub fn generate() -> Result<(String, String), getrandom::Error> {
    generate_for(false)
}

/// A new live or test key and its display prefix (a test key's shows `ask_test_` whole).
pub fn generate_for(test: bool) -> Result<(String, String), getrandom::Error> {
    let prefix = if test { TEST_PREFIX } else { PREFIX };
    let key = format!("{prefix}{}", random_base62(RANDOM_CHARS)?);
    let display = key[..prefix.len() + DISPLAY_CHARS - PREFIX.len()].to_owned();
    Ok((key, display))
}

/// The stored form of a key.
pub fn hash(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_the_prefix_and_enough_randomness() {
        let (a, pa) = generate().unwrap();
        let (b, _) = generate().unwrap();
        assert!(a.starts_with("ask_") && a.len() == 4 + RANDOM_CHARS);
        assert!(a[4..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
        assert!(a.starts_with(&pa) && pa.len() == DISPLAY_CHARS);
        assert_eq!(hash(&a).len(), 32);
    }

    #[test]
    fn test_keys_carry_their_prefix_then_the_usual_random_part() {
        let (k, display) = generate_for(true).unwrap();
        assert!(k.starts_with("ask_test_") && k.len() == 9 + RANDOM_CHARS);
        assert!(k[9..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(display, k[..9 + 8]);
        let (live, _) = generate_for(false).unwrap();
        assert!(!live.starts_with("ask_test_"), "base62 has no underscore");
    }
}
