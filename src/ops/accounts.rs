//! The rules of a dashboard account, shared by the first-run page and `convapi user create`:
//! email and password checks, Argon2id hashing and verification. Hashing is slow on purpose: run
//! it on a request thread (or the CLI), never inside a writer job.

use crate::invalid::Invalid;
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
pub fn check_email(email: &str) -> Result<&str, Invalid> {
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
pub fn check_password(password: &str) -> Result<(), Invalid> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_CHARS {
        Err(format!("The password must have at least {MIN_PASSWORD_CHARS} characters.").into())
    } else if n > MAX_PASSWORD_CHARS {
        Err(format!("The password must have at most {MAX_PASSWORD_CHARS} characters.").into())
    } else {
        Ok(())
    }
}

/// Argon2 computations running at once, at most: half the cores (at least one, at most 4), so
/// that password hashing never takes more than half the machine from the API (docs/hardening.md,
/// "Budgets"). Each takes 19 MiB (the default memory cost) for its duration; without a bound, one
/// login per request thread at once (from many addresses, which the throttle does not stop) took a
/// server to 1.2 GB.
pub fn hashing_slots() -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (cores / 2).clamp(1, 4)
}

/// Computations that may wait for a slot, at most; one more is refused at once ([`HashError::Busy`])
/// instead of holding its request thread. A wait is thus at most this many hashes long (each
/// ~30 ms on one core), and the threads held waiting are bounded whatever the number of clients.
pub fn hashing_queue() -> usize {
    hashing_slots() * 4
}

/// Why a password could not be hashed or checked.
#[derive(Debug, PartialEq, Eq)]
pub enum HashError {
    /// Every hashing slot is taken and the wait queue is full: try again in a moment.
    Busy,
    /// The hash could not be computed (a bug or a broken parameter set).
    Failed(String),
}

impl std::fmt::Display for HashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HashError::Busy => f.write_str("password hashing is busy: try again in a moment"),
            HashError::Failed(e) => write!(f, "cannot hash the password: {e}"),
        }
    }
}

/// Slots for Argon2 computations, with a bounded wait queue.
struct Slots {
    state: Mutex<(usize, usize)>,
    freed: Condvar,
    slots: usize,
    queue: usize,
}

impl Slots {
    const fn new(slots: usize, queue: usize) -> Slots {
        Slots {
            state: Mutex::new((0, 0)),
            freed: Condvar::new(),
            slots,
            queue,
        }
    }

    /// Runs `f` once a slot is free, or refuses at once when `queue` computations already wait.
    fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, HashError> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (busy, waiting) = &mut *s;
        if *busy >= self.slots {
            if *waiting >= self.queue {
                return Err(HashError::Busy);
            }
            *waiting += 1;
            while s.0 >= self.slots {
                s = self.freed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.1 -= 1;
        }
        s.0 += 1;
        drop(s);
        // Freed on the way out, a panic included.
        struct Release<'a>(&'a Slots);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.state.lock().unwrap_or_else(|p| p.into_inner()).0 -= 1;
                self.0.freed.notify_one();
            }
        }
        let _release = Release(self);
        Ok(f())
    }
}

/// Runs `f` (one Argon2 computation) in the process's hashing slots.
fn in_slot<T>(f: impl FnOnce() -> T) -> Result<T, HashError> {
    static SLOTS: std::sync::OnceLock<Slots> = std::sync::OnceLock::new();
    SLOTS
        .get_or_init(|| Slots::new(hashing_slots(), hashing_queue()))
        .run(f)
}

/// The Argon2id PHC string of a password (default parameters, a fresh random salt).
pub fn hash_password(password: &str) -> Result<String, HashError> {
    in_slot(|| {
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| HashError::Failed(e.to_string()))
    })?
}

/// Whether `password` matches the stored PHC string (false for a string that is not one);
/// [`HashError::Busy`] when no slot can be had.
pub fn verify_password(password: &str, phc: &str) -> Result<bool, HashError> {
    in_slot(|| {
        Argon2::default()
            .verify_password(password.as_bytes(), phc)
            .is_ok()
    })
}

/// A PHC string no password matches, verified when the email is unknown so that a failed login
/// takes as long whether the account exists or not. A constant: computing it took a hashing slot
/// (and ~30 ms) at the first login with an unknown email, or at start-up. Made by
/// [`hash_password`] with the parameters every hash has (`Argon2::default()`); a test checks that
/// they still are, so that its verification costs what a real one does.
pub fn dummy_hash() -> &'static str {
    "$argon2id$v=19$m=19456,t=2,p=1$jagpUmxBprRAxPjE+6xWPA$1EP0mgmmMLdkGaWWIJ7CvQ/n16fblN4DvJ1YpDZaJGQ"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_hash_has_the_parameters_of_every_hash_and_matches_no_password_tried() {
        let made = hash_password("anything at all").unwrap();
        let params = |phc: &str| phc.split('$').nth(3).unwrap().to_owned();
        assert_eq!(params(dummy_hash()), params(&made));
        assert!(dummy_hash().starts_with(&made[..made.find("$m=").unwrap()]));
        assert!(!verify_password("", dummy_hash()).unwrap());
        assert!(!verify_password("anything at all", dummy_hash()).unwrap());
    }

    #[test]
    fn hashes_are_argon2id_phc_strings_that_verify() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert_eq!(verify_password("correct horse battery", &h), Ok(true));
        assert_eq!(verify_password("correct horse batterY", &h), Ok(false));
        assert_eq!(verify_password("x", "not a phc string"), Ok(false));
    }

    #[test]
    fn argon2_runs_in_at_most_hashing_slots_at_once_and_refuses_past_its_queue() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NOW: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        // Slots of its own: the other tests hash in the process's slots meanwhile.
        static SLOTS: Slots = Slots::new(2, 8);
        let n = 4 * (2 + 8);
        let threads: Vec<_> = (0..n)
            .map(|_| {
                std::thread::spawn(|| {
                    SLOTS.run(|| {
                        let n = NOW.fetch_add(1, Ordering::SeqCst) + 1;
                        MOST.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        NOW.fetch_sub(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let most = MOST.load(Ordering::SeqCst);
        assert!((1..=2).contains(&most), "{most} at once");
        let refused = results
            .iter()
            .filter(|r| **r == Err(HashError::Busy))
            .count();
        let ran = results.iter().filter(|r| r.is_ok()).count();
        assert!(refused > 0, "{n} at once: none refused");
        assert!(ran >= 2 + 8, "{ran} ran of {n}");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=cores.div_ceil(2).min(4)).contains(&hashing_slots()));
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
