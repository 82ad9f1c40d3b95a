//! Seeds a benchmark database through the crate's own store: one tenant, one site, one API key,
//! and a realistic population of visitors, sessions, pageviews and identified users.
//!
//! ```text
//! cargo run --release --example seed -- --db bench.db --ids ids.txt [--sessions 120000] [--users 10000]
//! ```
//!
//! Every visitor has two sessions: an old one (outside the 30-day window) and a recent one (inside
//! it), so session resolution has to pick, as in real data. `--users` visitors are identified with a
//! `clientId`, a fifth of those across two devices (two visitors per `clientId`).
//!
//! Prints one JSON object on stdout: `{"siteId", "key", "trackerId", "sessions", "visitors",
//! "users"}`. Writes the identifiers a load generator may use to `--ids`, one per line,
//! `<field> <value>`, e.g. `clientId user-42`; every one of them resolves to a session in the window.
//! Data is deterministic (a fixed-seed PRNG); only the key and the site/tenant ids are random.

use std::io::Write;
use std::path::PathBuf;

use convapi::store::{self, sessions, sites::NewSite};

const DAY_MS: i64 = 86_400_000;

/// splitmix64: small, fast, deterministic; quality is ample for picking fixtures.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.next().to_le_bytes());
        b[8..].copy_from_slice(&self.next().to_le_bytes());
        uuid::Builder::from_random_bytes(b).into_uuid().to_string()
    }
}

struct Args {
    db: PathBuf,
    ids: PathBuf,
    sessions: usize,
    users: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        db: PathBuf::new(),
        ids: PathBuf::new(),
        sessions: 120_000,
        users: 10_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--db" => a.db = val()?.into(),
            "--ids" => a.ids = val()?.into(),
            "--sessions" => a.sessions = val()?.parse().map_err(|e| format!("--sessions: {e}"))?,
            "--users" => a.users = val()?.parse().map_err(|e| format!("--users: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.db.as_os_str().is_empty() || a.ids.as_os_str().is_empty() {
        return Err("usage: seed --db FILE --ids FILE [--sessions N] [--users N]".into());
    }
    if a.sessions < 2 || a.users > a.sessions / 2 {
        return Err("need --sessions >= 2 and --users <= sessions / 2".into());
    }
    Ok(a)
}

const SOURCES: [(&str, &str, &str); 5] = [
    ("newsletter", "email", "spring"),
    ("google", "cpc", "brand"),
    ("facebook", "paid", "retarget"),
    ("partner", "referral", "q3"),
    ("bing", "cpc", "generic"),
];

fn session(rng: &mut Rng, visitor: &str, client: Option<&str>, start: i64) -> sessions::Session {
    let mut campaign = sessions::Campaign::default();
    let (landing, referrer) = match rng.below(4) {
        0 => {
            let (s, m, c) = SOURCES[rng.below(SOURCES.len() as u64) as usize];
            campaign.utm_source = Some(s.into());
            campaign.utm_medium = Some(m.into());
            campaign.utm_campaign = Some(c.into());
            (
                format!("https://shop.example/?utm_source={s}&utm_medium={m}&utm_campaign={c}"),
                None,
            )
        }
        1 => {
            let g = format!("Cj0KCQ{:016x}", rng.next());
            let url = format!("https://shop.example/p/{}?gclid={g}", rng.below(500));
            campaign.gclid = Some(g);
            (url, Some("https://www.google.com/".to_owned()))
        }
        2 => (
            format!("https://shop.example/p/{}", rng.below(500)),
            Some("https://news.example/article".to_owned()),
        ),
        _ => (format!("https://shop.example/p/{}", rng.below(500)), None),
    };
    sessions::Session {
        id: rng.uuid(),
        visitor_id: visitor.to_owned(),
        client_id: client.map(str::to_owned),
        started_at: start,
        last_activity_at: start + rng.below(30 * 60_000) as i64,
        landing_url: Some(landing),
        referrer,
        campaign,
    }
}

fn run() -> Result<(), String> {
    let a = parse_args()?;
    let s = |e: store::StoreError| e.to_string();
    let mut conn = store::open(&a.db).map_err(s)?;
    // Bench fixtures, not customer data: no fsync and a large cache make seeding take seconds.
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;")
        .map_err(|e| e.to_string())?;
    let now = store::now_ms();
    let mut rng = Rng(0x5EED_C0DE);

    let tenant = store::tenants::create(&conn, &uuid::Uuid::new_v4().to_string(), "bench", now)
        .map_err(s)?;
    let tracker = convapi::keys::random_base62(12).map_err(|e| e.to_string())?;
    let site = store::sites::create(
        &conn,
        &NewSite {
            id: &uuid::Uuid::new_v4().to_string(),
            tenant_id: &tenant.id,
            tracker_id: &tracker,
            name: "bench shop",
            domain: Some("shop.example"),
            currency: "EUR",
            window_days: 30,
            model: "last_non_direct",
        },
        now,
    )
    .map_err(s)?;
    let (key, prefix) = convapi::keys::generate().map_err(|e| e.to_string())?;
    store::keys::create(
        &conn,
        &uuid::Uuid::new_v4().to_string(),
        &tenant.id,
        Some("bench"),
        &prefix,
        &convapi::keys::hash(&key),
        now,
    )
    .map_err(s)?;

    let visitors = a.sessions / 2;
    let mut ids = std::io::BufWriter::new(
        std::fs::File::create(&a.ids).map_err(|e| format!("{}: {e}", a.ids.display()))?,
    );
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    let mut recent_sessions = Vec::new();
    for v in 0..visitors {
        let visitor = rng.uuid();
        // The first `users` visitors are identified; a fifth of the users also own the next visitor
        // (a second device), so some clientIds name two visitors.
        let user = if v < a.users {
            Some(format!("user-{v}"))
        } else if v < a.users + a.users / 5 {
            Some(format!("user-{}", v - a.users))
        } else {
            None
        };
        let created = now - 60 * DAY_MS + rng.below(10 * DAY_MS as u64) as i64;
        sessions::ensure_visitor(&tx, &site.id, &visitor, created).map_err(s)?;
        if let Some(u) = &user {
            sessions::link_client(&tx, &site.id, u, &visitor, created).map_err(s)?;
        }
        let old = session(&mut rng, &visitor, user.as_deref(), created);
        // Recent: started 1 minute to 20 days ago, so it is inside the 30-day window.
        let start = now - 60_000 - rng.below(20 * DAY_MS as u64) as i64;
        let recent = session(&mut rng, &visitor, user.as_deref(), start);
        for sess in [&old, &recent] {
            sessions::insert(&tx, &site.id, sess).map_err(s)?;
            sessions::insert_event(
                &tx,
                &sessions::NewEvent {
                    id: &rng.uuid(),
                    site_id: &site.id,
                    session_id: &sess.id,
                    kind: "pageview",
                    name: None,
                    url: sess.landing_url.as_deref(),
                    props: None,
                    ts: sess.started_at,
                },
            )
            .map_err(s)?;
        }
        if v < a.users {
            writeln!(ids, "clientId user-{v}").map_err(|e| e.to_string())?;
        } else {
            writeln!(ids, "visitorId {visitor}").map_err(|e| e.to_string())?;
        }
        if v % 10 == 0 {
            recent_sessions.push(recent.id.clone());
        }
    }
    for id in &recent_sessions {
        writeln!(ids, "sessionId {id}").map_err(|e| e.to_string())?;
    }
    tx.commit().map_err(|e| e.to_string())?;
    ids.flush().map_err(|e| e.to_string())?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(|e| e.to_string())?;

    println!(
        "{}",
        serde_json::json!({
            "siteId": site.id,
            "trackerId": site.tracker_id,
            "key": key,
            "sessions": visitors * 2,
            "visitors": visitors,
            "users": a.users,
        })
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("seed: error: {e}");
        std::process::exit(1);
    }
}
