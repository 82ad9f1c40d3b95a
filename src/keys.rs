//! API keys: `ask_` + 40 base62 characters from the OS random source. Only the SHA-256 is stored.

use sha2::{Digest, Sha256};

pub const PREFIX: &str = "ask_";
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
    let key = format!("{PREFIX}{}", random_base62(RANDOM_CHARS)?);
    let display = key[..DISPLAY_CHARS].to_owned();
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
}
