//! Limits kept in memory per key, with no I/O and no clock of their own (callers pass `now`):
//! the pixel's token buckets per client address and per tracker (docs/decisions.md §8), the login
//! throttle's failures per account and per address (§10), and the writes done at most once a
//! minute (an API key's `lastUsedAt`, a dashboard session's `last_seen_at`); and [`Places`], a
//! bound on how many of something are under way at once (pixel jobs in the writer's channel), with
//! [`KeyedPlaces`] a bound per key as well (the dashboard's test events and the sender's
//! destinations in hand, per tenant).
//!
//! One mechanism, [`Limiter`]: a table of per-key state behind one lock, whose policy is a
//! parameter: [`Rate`] (a token bucket) or [`Window`] (at most so many events within a window).
//! Memory is bounded: at most [`Policy::max_keys`] keys live at once. When the table is full,
//! entries that carry no information any more (a bucket refilled, a window emptied) are dropped
//! first; if none has, a new key is let through unmetered rather than evicting an entry that is
//! limiting someone (the pixel's coarser tracker bucket still bounds the total).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a [`Limiter`] keeps per key and when that says nothing any more.
pub trait Policy {
    type State;
    /// The state of a key seen for the first time.
    fn fresh(&self, now: Instant) -> Self::State;
    /// Whether `state` is as good as [`Policy::fresh`]'s: such entries are dropped first.
    fn is_spent(&self, state: &Self::State, now: Instant) -> bool;
    /// Most keys kept at once.
    fn max_keys(&self) -> usize;
}

/// Per-key state under one policy, bounded (see the module's header).
pub struct Limiter<K, P: Policy> {
    policy: P,
    table: Mutex<HashMap<K, P::State>>,
}

impl<K: Hash + Eq + Clone, P: Policy> Limiter<K, P> {
    pub fn new(policy: P) -> Limiter<K, P> {
        Limiter {
            policy,
            table: Mutex::new(HashMap::new()),
        }
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, P::State>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `key`'s state, made fresh if the key is new; `None` when the table is full of
    /// entries that still say something (the key is then not kept: unmetered).
    fn with<R>(&self, key: &K, now: Instant, f: impl FnOnce(&P, &mut P::State) -> R) -> Option<R> {
        let p = &self.policy;
        let mut table = self.lock();
        if !table.contains_key(key) {
            if table.len() >= p.max_keys() {
                table.retain(|_, s| !p.is_spent(s, now));
            }
            if table.len() >= p.max_keys() {
                return None;
            }
            table.insert(key.clone(), p.fresh(now));
        }
        Some(f(p, table.get_mut(key).expect("inserted above")))
    }

    /// Runs `f` on `key`'s state if the key is kept, and drops the entry if `f` leaves it spent.
    fn with_kept(&self, key: &K, now: Instant, f: impl FnOnce(&mut P::State)) {
        let mut table = self.lock();
        if let Some(s) = table.get_mut(key) {
            f(s);
            if self.policy.is_spent(s, now) {
                table.remove(key);
            }
        }
    }

    /// Forgets `key`: it starts fresh.
    pub fn forget(&self, key: &K) {
        self.lock().remove(key);
    }
}

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

    /// One event per `interval`: a key's first event passes, the next one `interval` later.
    pub fn once_every(interval: Duration, max_keys: usize) -> Rate {
        Rate {
            per_second: 1.0 / interval.as_secs_f64(),
            burst: 1.0,
            max_keys,
        }
    }

    pub fn is_off(&self) -> bool {
        self.per_second <= 0.0
    }

    fn level(&self, b: &Bucket, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + elapsed * self.per_second).min(self.burst)
    }
}

/// A token bucket: its tokens when last seen.
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Policy for Rate {
    type State = Bucket;

    fn fresh(&self, now: Instant) -> Bucket {
        Bucket {
            tokens: self.burst,
            at: now,
        }
    }

    fn is_spent(&self, b: &Bucket, now: Instant) -> bool {
        self.level(b, now) >= self.burst
    }

    fn max_keys(&self) -> usize {
        self.max_keys
    }
}

impl<K: Hash + Eq + Clone> Limiter<K, Rate> {
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
        if self.policy.is_off() {
            return Ok(());
        }
        self.with(key, now, |r, b| {
            let cost = cost.min(r.burst);
            b.tokens = r.level(b, now);
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
        })
        .unwrap_or(Ok(()))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Take,
    Charge,
    Peek,
}

/// At most `limit` events per key within any `within`: a sliding window over the times of the
/// last `limit` events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub limit: usize,
    pub within: Duration,
    /// Most keys kept at once.
    pub max_keys: usize,
}

impl Window {
    fn recent(&self, times: &mut Vec<Instant>, now: Instant) {
        times.retain(|t| now.saturating_duration_since(*t) < self.within);
    }
}

impl Policy for Window {
    type State = Vec<Instant>;

    fn fresh(&self, _now: Instant) -> Vec<Instant> {
        Vec::new()
    }

    fn is_spent(&self, times: &Vec<Instant>, now: Instant) -> bool {
        times
            .iter()
            .all(|t| now.saturating_duration_since(*t) >= self.within)
    }

    fn max_keys(&self) -> usize {
        self.max_keys
    }
}

impl<K: Hash + Eq + Clone> Limiter<K, Window> {
    /// Counts an event of `key` at `now`, or refuses it with the wait until the oldest of the
    /// window's events leaves it. `Ok(false)`: allowed but not counted (the table is full).
    pub fn count(&self, key: &K, now: Instant) -> Result<bool, Duration> {
        self.with(key, now, |w, times| {
            w.recent(times, now);
            if times.len() >= w.limit {
                let oldest = times.iter().min().copied().unwrap_or(now);
                return Err(w
                    .within
                    .saturating_sub(now.saturating_duration_since(oldest)));
            }
            times.push(now);
            Ok(true)
        })
        .unwrap_or(Ok(false))
    }

    /// Takes back the event of `key` counted at `at` (say, an attempt that did not fail).
    pub fn uncount(&self, key: &K, at: Instant) {
        self.with_kept(key, at, |times| {
            if let Some(i) = times.iter().position(|t| *t == at) {
                times.remove(i);
            }
        });
    }
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

/// At most `max` of something under way at once, without waiting: a [`Place`] is taken at once or
/// refused, and given back when dropped (after a panic too). Clones share the places.
#[derive(Debug, Clone)]
pub struct Places {
    taken: Arc<AtomicUsize>,
    max: usize,
}

/// One of a [`Places`]'s places, given back when dropped.
#[derive(Debug)]
pub struct Place(Arc<AtomicUsize>);

impl Places {
    pub fn new(max: usize) -> Places {
        Places {
            taken: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A place, or `None` when all `max` are taken.
    pub fn take(&self) -> Option<Place> {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(self.taken.clone()))
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// How many are taken now.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`Places`] with a bound per key too: at most `per_key` of the `max` places for one key (a
/// tenant's test events), so one key cannot hold them all. Keys are kept only while they hold a
/// place: at most `max` at once.
#[derive(Debug, Clone)]
pub struct KeyedPlaces {
    total: Places,
    per_key: usize,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// Why a [`KeyedPlaces`] gave no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The key holds its `per_key` places.
    Key,
    /// All `max` places are taken.
    Total,
}

/// One of a [`KeyedPlaces`]'s places, given back when dropped.
#[derive(Debug)]
pub struct KeyedPlace {
    _place: Place,
    key: String,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl KeyedPlaces {
    pub fn new(max: usize, per_key: usize) -> KeyedPlaces {
        KeyedPlaces {
            total: Places::new(max),
            per_key,
            held: Arc::default(),
        }
    }

    /// A place for `key`, or why not.
    pub fn take(&self, key: &str) -> Result<KeyedPlace, Full> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.get(key).copied().unwrap_or(0);
        if n >= self.per_key {
            return Err(Full::Key);
        }
        let place = self.total.take().ok_or(Full::Total)?;
        held.insert(key.to_owned(), n + 1);
        Ok(KeyedPlace {
            _place: place,
            key: key.to_owned(),
            held: self.held.clone(),
        })
    }

    pub fn max(&self) -> usize {
        self.total.max()
    }

    pub fn per_key(&self) -> usize {
        self.per_key
    }
}

impl Drop for KeyedPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
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
    fn once_every_lets_one_event_through_per_interval() {
        let l = Limiter::new(Rate::once_every(Duration::from_secs(60), 10));
        let t0 = Instant::now();
        assert!(l.take(&"key", 1.0, t0).is_ok());
        assert!(l.take(&"key", 1.0, t0 + Duration::from_secs(59)).is_err());
        assert!(l.take(&"other", 1.0, t0).is_ok());
        assert!(l.take(&"key", 1.0, t0 + Duration::from_secs(60)).is_ok());
    }

    fn window(limit: usize, secs: u64, max_keys: usize) -> Window {
        Window {
            limit,
            within: Duration::from_secs(secs),
            max_keys,
        }
    }

    #[test]
    fn a_window_counts_its_limit_then_refuses_until_the_oldest_leaves() {
        let l = Limiter::new(window(3, 100, 10));
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(l.count(&"a", t0 + Duration::from_secs(i * 10)), Ok(true));
        }
        // The oldest, at t0, leaves the window at t0 + 100.
        assert_eq!(
            l.count(&"a", t0 + Duration::from_secs(40)),
            Err(Duration::from_secs(60))
        );
        assert_eq!(l.count(&"b", t0), Ok(true), "other keys have their own");
        assert_eq!(l.count(&"a", t0 + Duration::from_secs(100)), Ok(true));
        // Taking an event back makes room for one more at once.
        let t1 = t0 + Duration::from_secs(101);
        assert!(l.count(&"a", t1).is_err());
        l.uncount(&"a", t0 + Duration::from_secs(100));
        assert_eq!(l.count(&"a", t1), Ok(true));
        l.forget(&"a");
        assert_eq!(l.count(&"a", t1), Ok(true), "forgotten: fresh");
    }

    #[test]
    fn a_full_window_table_drops_emptied_windows_first_and_lets_the_rest_through() {
        let l = Limiter::new(window(1, 100, 2));
        let t0 = Instant::now();
        assert_eq!(l.count(&1, t0), Ok(true));
        assert_eq!(l.count(&2, t0 + Duration::from_secs(50)), Ok(true));
        // Full of live windows: a third key passes uncounted, nobody is evicted.
        assert_eq!(l.count(&3, t0 + Duration::from_secs(60)), Ok(false));
        assert!(l.count(&1, t0 + Duration::from_secs(60)).is_err());
        // Once key 1's window has emptied, it makes room for key 3.
        assert_eq!(l.count(&3, t0 + Duration::from_secs(120)), Ok(true));
        assert!(l.count(&3, t0 + Duration::from_secs(121)).is_err());
        assert!(
            l.count(&2, t0 + Duration::from_secs(121)).is_err(),
            "key 2 kept"
        );
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

    #[test]
    fn places_are_refused_beyond_max_and_given_back_when_dropped() {
        let places = Places::new(2);
        let a = places.take().expect("first");
        let b = places.clone().take().expect("second, through a clone");
        assert!(places.take().is_none(), "a third");
        assert_eq!(places.taken(), 2);
        drop(a);
        let c = places.take().expect("the freed place");
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _d = places.take();
                panic!("holding a place");
            })
            .join()
        });
        assert!(panicked.is_err());
        assert_eq!(places.taken(), 2, "given back by the panic too");
        drop((b, c));
        assert_eq!(places.taken(), 0);
    }

    #[test]
    fn keyed_places_bound_each_key_and_the_total() {
        let places = KeyedPlaces::new(2, 1);
        let a = places.take("tenant-a").expect("a's first");
        assert_eq!(places.take("tenant-a").unwrap_err(), Full::Key);
        let b = places
            .take("tenant-b")
            .expect("b's first, though a holds one");
        assert_eq!(places.take("tenant-c").unwrap_err(), Full::Total);
        drop(a);
        let a2 = places.take("tenant-a").expect("a's place given back");
        assert_eq!(places.take("tenant-b").unwrap_err(), Full::Key);
        drop((a2, b));
        assert!(places.held.lock().unwrap().is_empty(), "no key kept idle");
        let _c = places.take("tenant-c").expect("all free again");
    }
}
