//! Token buckets in memory, keyed by client address or tracker id, for the public pixel endpoint
//! (docs/decisions.md §8). Pure bookkeeping: no I/O, no clock of its own (callers pass `now`).
//!
//! Memory is bounded: at most [`Rate::max_keys`] buckets live at once. When the table is full,
//! buckets that have refilled completely (they carry no information) are dropped first; if none
//! has, a new key is let through unmetered rather than evicting a bucket that is limiting someone,
//! and the coarser tracker bucket still bounds the total.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How fast a bucket refills and how much it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second; 0 turns the limit off.
    pub per_second: f64,
    /// Most tokens a bucket holds: the largest burst.
    pub burst: f64,
    /// Most buckets kept at once.
    pub max_keys: usize,
}

impl Rate {
    pub fn off() -> Rate {
        Rate {
            per_second: 0.0,
            burst: 0.0,
            max_keys: 0,
        }
    }

    pub fn is_off(&self) -> bool {
        self.per_second <= 0.0
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A set of token buckets, one per key.
pub struct Limiter<K> {
    rate: Rate,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub fn new(rate: Rate) -> Limiter<K> {
        Limiter {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `cost` tokens from `key`'s bucket, or says how long until it holds that many. A cost
    /// over the burst is charged as the burst (it can never fit otherwise).
    pub fn take(&self, key: &K, cost: f64, now: Instant) -> Result<(), Duration> {
        self.check(key, cost, now, Mode::Take)
    }

    /// Like [`Limiter::take`], but a refused cost is charged too, as debt of up to one burst: a
    /// client that keeps sending while refused stays refused (and is refused cheaply, by
    /// [`Limiter::peek`], before its next body is read) until it slows down.
    pub fn charge(&self, key: &K, cost: f64, now: Instant) -> Result<(), Duration> {
        self.check(key, cost, now, Mode::Charge)
    }

    /// Like [`Limiter::take`], but only looks: whether `cost` tokens are there now.
    pub fn peek(&self, key: &K, cost: f64, now: Instant) -> Result<(), Duration> {
        self.check(key, cost, now, Mode::Peek)
    }

    fn check(&self, key: &K, cost: f64, now: Instant, mode: Mode) -> Result<(), Duration> {
        let r = self.rate;
        if r.is_off() {
            return Ok(());
        }
        let cost = cost.min(r.burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(key) {
            if buckets.len() >= r.max_keys {
                buckets.retain(|_, b| level(b, r, now) < r.burst);
            }
            if buckets.len() >= r.max_keys {
                return Ok(());
            }
            buckets.insert(
                key.clone(),
                Bucket {
                    tokens: r.burst,
                    at: now,
                },
            );
        }
        let b = buckets.get_mut(key).expect("inserted above");
        b.tokens = level(b, r, now);
        b.at = now;
        if b.tokens >= cost {
            if mode != Mode::Peek {
                b.tokens -= cost;
            }
            Ok(())
        } else {
            if mode == Mode::Charge {
                b.tokens = (b.tokens - cost).max(-r.burst);
            }
            Err(
                Duration::from_secs_f64((cost - b.tokens.max(0.0)) / r.per_second)
                    .max(Duration::from_secs_f64(-b.tokens.min(0.0) / r.per_second)),
            )
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Take,
    Charge,
    Peek,
}

fn level(b: &Bucket, r: Rate, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
    (b.tokens + elapsed * r.per_second).min(r.burst)
}

/// The key a client address is limited under: the address itself for IPv4, its /64 network for
/// IPv6 (one host usually holds a whole /64, and could otherwise take a fresh bucket per request).
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: f64, burst: f64, max_keys: usize) -> Rate {
        Rate {
            per_second,
            burst,
            max_keys,
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let l = Limiter::new(rate(10.0, 20.0, 10));
        let t0 = Instant::now();
        assert!(l.take(&"a", 20.0, t0).is_ok());
        let wait = l.take(&"a", 5.0, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        // Other keys have their own bucket.
        assert!(l.take(&"b", 1.0, t0).is_ok());
        assert!(l.take(&"a", 5.0, t0 + Duration::from_millis(500)).is_ok());
        assert!(l.peek(&"a", 0.1, t0 + Duration::from_millis(500)).is_err());
        // A cost over the burst is charged as the burst.
        assert!(l.take(&"a", 1000.0, t0 + Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn a_refused_charge_is_owed_up_to_one_burst() {
        let l = Limiter::new(rate(10.0, 20.0, 10));
        let t0 = Instant::now();
        assert!(l.charge(&"a", 20.0, t0).is_ok());
        // Refused, and owed: 15 tokens of debt take 1.5 s to repay before anything fits again.
        let wait = l.charge(&"a", 15.0, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 1.5).abs() < 1e-9, "{wait:?}");
        assert!(l.peek(&"a", 1.0, t0 + Duration::from_millis(1000)).is_err());
        assert!(l.peek(&"a", 1.0, t0 + Duration::from_millis(1600)).is_ok());
        // The debt is at most one burst.
        for _ in 0..10 {
            let _ = l.charge(&"a", 20.0, t0 + Duration::from_secs(10));
        }
        assert!(l
            .peek(
                &"a",
                1.0,
                t0 + Duration::from_secs(12) + Duration::from_millis(100)
            )
            .is_ok());
        // `take` owes nothing.
        let m = Limiter::new(rate(10.0, 20.0, 10));
        m.take(&"a", 20.0, t0).unwrap();
        assert!(m.take(&"a", 15.0, t0).is_err());
        assert!(m.peek(&"a", 1.0, t0 + Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn peek_takes_nothing() {
        let l = Limiter::new(rate(1.0, 1.0, 10));
        let t0 = Instant::now();
        assert!(l.peek(&1, 1.0, t0).is_ok());
        assert!(l.peek(&1, 1.0, t0).is_ok());
        assert!(l.take(&1, 1.0, t0).is_ok());
        assert!(l.peek(&1, 1.0, t0).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_drops_refilled_buckets_first() {
        let l = Limiter::new(rate(1.0, 2.0, 2));
        let t0 = Instant::now();
        l.take(&1, 2.0, t0).unwrap();
        l.take(&2, 2.0, t0).unwrap();
        // Full, and both buckets are limiting: a third key is not metered, nobody is evicted.
        assert!(l.take(&3, 100.0, t0).is_ok());
        assert!(l.take(&1, 1.0, t0).is_err());
        // Once key 2 has refilled, it makes room for key 3.
        let later = t0 + Duration::from_secs(5);
        l.take(&1, 2.0, later - Duration::from_secs(3)).unwrap();
        l.take(&3, 2.0, later).unwrap();
        assert!(l.take(&3, 1.0, later).is_err(), "key 3 is metered now");
    }

    #[test]
    fn off_allows_everything() {
        let l = Limiter::new(Rate::off());
        for _ in 0..1000 {
            assert!(l.take(&"a", 100.0, Instant::now()).is_ok());
        }
    }

    #[test]
    fn ipv6_clients_are_limited_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(address_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }
}
