//! The rules of a dashboard account, shared by the first-run page and `convapi user create`:
//! email and password checks, Argon2id hashing and verification. Hashing is slow on purpose: run
//! it on a request thread (or the CLI), never inside a writer job.

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
use std::sync::{Condvar, Mutex};

/// The shortest password accepted, in characters.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// The longest password accepted, in characters (bounds the work of one hash).
pub const MAX_PASSWORD_CHARS: usize = 1024;
/// The longest email address accepted.
const MAX_EMAIL_CHARS: usize = 254;

/// An email address, trimmed: something before and after one `@`, no spaces or control characters.
pub fn check_email(email: &str) -> Result<&str, String> {
    let e = email.trim();
    let ok = e.chars().count() <= MAX_EMAIL_CHARS
        && e.split_once('@').is_some_and(|(local, host)| {
            !local.is_empty() && host.contains('.') && !host.contains('@')
        })
        && !e.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(e)
    } else {
        Err("Enter an email address such as name@example.com.".into())
    }
}

/// The password rules: [`MIN_PASSWORD_CHARS`] to [`MAX_PASSWORD_CHARS`] characters.
pub fn check_password(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_CHARS {
        Err(format!(
            "The password must have at least {MIN_PASSWORD_CHARS} characters."
        ))
    } else if n > MAX_PASSWORD_CHARS {
        Err(format!(
            "The password must have at most {MAX_PASSWORD_CHARS} characters."
        ))
    } else {
        Ok(())
    }
}

/// Argon2 computations running at once, at most: one per core, at most 4. Each takes 19 MiB
/// (the default memory cost) for its duration; without a bound, one login per request thread at
/// once (from many addresses, which the throttle does not stop) took a server to 1.2 GB. Others
/// wait their turn; the waiting is bounded by the request threads.
fn hashing_slots() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(4)
}

/// Runs `f` (one Argon2 computation) once a slot is free.
fn in_slot<T>(f: impl FnOnce() -> T) -> T {
    static BUSY: Mutex<usize> = Mutex::new(0);
    static FREED: Condvar = Condvar::new();
    let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
    while *busy >= hashing_slots() {
        busy = FREED.wait(busy).unwrap_or_else(|p| p.into_inner());
    }
    *busy += 1;
    drop(busy);
    // Freed on the way out, a panic included.
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            *BUSY.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            FREED.notify_one();
        }
    }
    let _release = Release;
    f()
}

/// The Argon2id PHC string of a password (default parameters, a fresh random salt).
pub fn hash_password(password: &str) -> Result<String, String> {
    in_slot(|| {
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| format!("cannot hash the password: {e}"))
    })
}

/// Whether `password` matches the stored PHC string (false for a string that is not one).
pub fn verify_password(password: &str, phc: &str) -> bool {
    in_slot(|| {
        Argon2::default()
            .verify_password(password.as_bytes(), phc)
            .is_ok()
    })
}

/// A PHC string no password matches, verified when the email is unknown so that a failed login
/// takes as long whether the account exists or not.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_password("not the password of anyone: a dummy for timing")
            .unwrap_or_else(|_| String::new())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_argon2id_phc_strings_that_verify() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password("correct horse battery", &h));
        assert!(!verify_password("correct horse batterY", &h));
        assert!(!verify_password("x", "not a phc string"));
    }

    #[test]
    fn argon2_runs_in_at_most_hashing_slots_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NOW: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        let threads: Vec<_> = (0..16)
            .map(|_| {
                std::thread::spawn(|| {
                    in_slot(|| {
                        let n = NOW.fetch_add(1, Ordering::SeqCst) + 1;
                        MOST.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        NOW.fetch_sub(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let most = MOST.load(Ordering::SeqCst);
        assert!(most >= 1 && most <= hashing_slots(), "{most} at once");
    }

    #[test]
    fn rules() {
        assert!(check_password("123456789").is_err());
        assert!(check_password("1234567890").is_ok());
        assert!(check_password(&"x".repeat(1025)).is_err());
        assert_eq!(check_email(" a@b.example "), Ok("a@b.example"));
        for bad in ["", "a", "@b.c", "a@b", "a b@c.d", "a@b@c.d"] {
            assert!(check_email(bad).is_err(), "{bad}");
        }
    }
}
