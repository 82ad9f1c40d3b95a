//! What the machine charges for the two things convapi's write path cannot avoid: waking a thread
//! that waits (each conversion is handed from thread to thread about five times) and syncing a
//! file (once per group commit). The CPU benchmark's figures are only comparable between
//! machines where these are alike; see docs/development.md, "The floor of the design".
//!
//! ```text
//! cargo run --release --example machine_costs -- [DIR]
//! ```
//!
//! Prints, for a token handed back and forth between two threads through a mutex and a condition
//! variable (the way the writer and a request thread hand each other a job and its answer), the
//! wall and the process CPU time per round trip, with the two threads free to run on any core and
//! with both pinned to core 0; then, for a 4 KiB `pwrite` followed by `fsync` and by `fdatasync`
//! in a file in DIR (default: the temporary directory), the wall and CPU time of each pair.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const ROUND_TRIPS: u32 = 100_000;
const SYNCS: u32 = 300;

/// The process's user + system CPU time so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Pins the calling thread to core 0.
fn pin_to_core_0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Wall and CPU time per round trip of a token between two threads.
fn ping_pong(pinned: bool) -> (Duration, Duration) {
    let turn = Arc::new((Mutex::new(false), Condvar::new()));
    if pinned {
        pin_to_core_0();
    }
    let other = {
        let turn = turn.clone();
        std::thread::spawn(move || {
            if pinned {
                pin_to_core_0();
            }
            let (lock, cv) = &*turn;
            for _ in 0..ROUND_TRIPS {
                let mut mine = cv.wait_while(lock.lock().unwrap(), |t| !*t).unwrap();
                *mine = false;
                cv.notify_one();
            }
        })
    };
    let (wall, cpu) = (Instant::now(), cpu_time());
    let (lock, cv) = &*turn;
    for _ in 0..ROUND_TRIPS {
        let mut t = lock.lock().unwrap();
        *t = true;
        cv.notify_one();
        drop(cv.wait_while(t, |t| *t).unwrap());
    }
    other.join().unwrap();
    let per = |d: Duration| d / ROUND_TRIPS;
    (per(wall.elapsed()), per(cpu_time() - cpu))
}

/// Wall and CPU time per 4 KiB write and its sync.
fn write_and_sync(dir: &std::path::Path, data_only: bool) -> (Duration, Duration) {
    let path = dir.join(format!("machine_costs.{}", std::process::id()));
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    let page = [0x5a_u8; 4096];
    let (wall, cpu) = (Instant::now(), cpu_time());
    for i in 0..SYNCS {
        file.write_all_at(&page, u64::from(i % 16) * 4096).unwrap();
        if data_only {
            file.sync_data().unwrap();
        } else {
            file.sync_all().unwrap();
        }
    }
    let took = (wall.elapsed() / SYNCS, (cpu_time() - cpu) / SYNCS);
    let _ = std::fs::remove_file(&path);
    took
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("machine costs ({cores} cores available)");
    // Unpinned first: once the main thread is pinned it stays so.
    for (label, pinned) in [("any core", false), ("both on core 0", true)] {
        let (wall, cpu) = ping_pong(pinned);
        println!(
            "hand-over round trip, {label}: {:.1} µs wall, {:.1} µs CPU ({ROUND_TRIPS} round trips)",
            us(wall),
            us(cpu)
        );
    }
    for (label, data_only) in [("fsync", false), ("fdatasync", true)] {
        let (wall, cpu) = write_and_sync(&dir, data_only);
        println!(
            "4 KiB pwrite + {label} in {}: {:.0} µs wall, {:.0} µs CPU ({SYNCS} times)",
            dir.display(),
            us(wall),
            us(cpu)
        );
    }
}
