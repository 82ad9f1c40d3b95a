//! Security checks (docs/decisions.md §3 for tenancy, §6 for keys):
//! - keys are looked up by the SHA-256 of the presented key (an index lookup, no comparison of
//!   secrets in our code) and only the hash is stored;
//! - neither a key nor its hash ever reaches the server's log, even at `trace`;
//! - SQL is built only from bound parameters: a scan of `src/` for `format!`-built SQL, which may
//!   interpolate only reviewed constants, and injection attempts stored verbatim;
//! - tenant isolation on both endpoints (POST report and GET status);
//! - revoked keys and malformed `Authorization` headers get 401.

use crate::common::*;
use serde_json::json;
use sha2::{Digest, Sha256};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn keys_are_stored_and_looked_up_as_hashes_and_never_logged() {
    let app = TestApp::builder().env("RUST_LOG", "trace").start();
    app.pageview("v-sec", "https://shop.example/", now_ms() - 60_000);
    let key = app.key.key.clone();
    let digest = Sha256::digest(key.as_bytes());
    // Stored: the hash, and nothing of the key beyond its display prefix.
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM api_keys WHERE hash = ?1",
            &[&digest.as_slice()]
        ),
        1
    );
    // Used: valid, unknown (one character off), revoked.
    app.post_conversion(&json!({"visitorId": "v-sec", "orderId": "s-1"}))
        .accepted();
    let mut wrong = key.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'a' { 'b' } else { 'a' });
    let r = app.post_conversion_as(&wrong, &app.site.id, &json!({"visitorId": "v-sec"}));
    expect_error(&r, 401, "UNAUTHORIZED");
    let other = app.create_key(&app.tenant.id);
    app.revoke_key(&other.id);
    let r = app.post_conversion_as(&other.key, &app.site.id, &json!({"visitorId": "v-sec"}));
    expect_error(&r, 401, "UNAUTHORIZED");
    let secret_part = &key[app.key.prefix.len()..];
    let db = app.db_text();
    assert!(!contains(&db, key.as_bytes()), "the key is in the database");
    assert!(
        !contains(&db, secret_part.as_bytes()),
        "the key's secret part is in the database"
    );

    let log = app.log();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "trace logging did not take effect"
    );
    for (what, needle) in [
        ("the key", key.clone()),
        ("the key's secret part", secret_part.to_owned()),
        ("the wrong key", wrong.clone()),
        ("the revoked key", other.key.clone()),
        ("the key's hash (hex)", hex(&digest)),
        (
            "the revoked key's hash",
            hex(&Sha256::digest(other.key.as_bytes())),
        ),
    ] {
        assert!(!log.contains(&needle), "{what} is in the server log");
    }
}

/// Every `format!(...)` invocation in `src/`, as source text.
fn format_invocations(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("format!(") {
        let body = &rest[i + "format!(".len()..];
        let (mut depth, mut in_str, mut esc, mut end) = (1usize, false, false, body.len());
        for (j, ch) in body.char_indices() {
            if in_str {
                match (esc, ch) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match ch {
                '"' => in_str = true,
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(body[..end].to_owned());
        rest = &body[end..];
    }
    out
}

/// What a SQL `format!` may interpolate: reviewed names of columns and constants, never input.
const SQL_INTERPOLATION_ALLOWED: &[&str] = &[
    "COLUMNS",             // store/keys.rs, store/sites.rs: a const column list
    "source.column()",     // store/conversions.rs: an enum's &'static str column name
    "c.source.column()",   // same
    "by.column()",         // store/report.rs: a GroupBy enum's &'static str column name
    "by.rollup_key()",     // store/report.rs: a GroupBy enum's &'static str rollup expression
    "oracle_condition",    // store/dashboard.rs unit tests: the tests' constant WHERE conditions
    "STATUS_COLUMNS",      // store/conversions.rs, store/export.rs: the order status column list
    "ENTRY_COLUMNS",       // store/outbox.rs: the outbox entry column list
    "PG_SUMS",             // store/report.rs: the rollup sums' const columns on PostgreSQL
    "sessions::COLUMNS",   // store/export.rs: sessions.rs's const column list
    "table_ident",         // store/copy.rs: a table of copy::TABLES or the catalog's, quoted
    "column_list",         // store/copy.rs: a table's columns as both catalogs name them, quoted
    "identity_column",     // store/copy.rs: an identity column the target's catalog names, quoted
    "REAL_TOLERANCE",      // store/copy.rs: the const tolerance of a REAL rollup cell
    "SESSION_COLUMNS",     // store/deliveries.rs: a session's const forwarding column list
    "timeout_ms",          // store/engine/postgres.rs: a u128 number of milliseconds
    "placeholders",        // store/adjustments.rs, store/conversions.rs: `?1, ?2, …` from a count
    "DUE",            // store/adjustment_deliveries.rs: the const condition of a due adjustment
    "ADJUSTMENT_DUE", // store/deliveries.rs: the same const, imported
    "CELL",           // store/adjustments.rs: the const expressions of an order's report cell
    "dated_code",     // store/report.rs: a Dated enum's integer code
    "at_column",      // store/report.rs: a Dated enum's &'static str column
    "COUNTED_CONVERSIONS", // store/report.rs: the const FROM … WHERE of the counted conversions
    "set_after",      // store/referrals.rs: one of two const SET fragments, chosen by a match
    "list_is",        // store/referrals.rs: one of two const conditions, chosen by an if
    // store/dialect.rs's words, each spelled by the connection's engine from `&'static str`
    // arguments only (its parameters named const_…), and the table files' names for them.
    "const_index",
    "const_object",
    "const_key",
    "const_table",
    "const_column",
    "const_value",
    "indexed_by",
    "row_order",
    "join_in_order",
    "json_has_key",
    "next_id",
    "caseless_eq",
    "for_update",
];

#[test]
fn sql_is_built_only_from_bound_parameters() {
    let sql = regex_lite_sql();
    let mut checked = 0;
    let mut offenders = Vec::new();
    for entry in walk("src") {
        let text = std::fs::read_to_string(&entry).unwrap();
        for inv in format_invocations(&text) {
            let literal = inv.split('"').nth(1).unwrap_or("");
            if !sql(literal) {
                continue;
            }
            checked += 1;
            // Inline `{name}` captures and trailing arguments.
            let mut used: Vec<String> = Vec::new();
            let mut s = literal;
            while let Some(a) = s.find('{') {
                let Some(b) = s[a..].find('}') else { break };
                let name = &s[a + 1..a + b];
                if !name.is_empty() && !name.starts_with('{') {
                    used.push(name.split(':').next().unwrap().to_owned());
                }
                s = &s[a + b + 1..];
            }
            let after = inv.rsplit_once('"').map(|(_, a)| a).unwrap_or("");
            used.extend(
                after
                    .split(',')
                    .map(|a| a.trim().to_owned())
                    .filter(|a| !a.is_empty()),
            );
            for u in used {
                if !SQL_INTERPOLATION_ALLOWED.contains(&u.as_str()) {
                    offenders.push(format!(
                        "{}: interpolates `{u}` into {literal:?}",
                        entry.display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 0,
        "the scan found no SQL format! at all: is it still looking?"
    );
    assert!(
        offenders.is_empty(),
        "SQL built with format! from values that are not reviewed constants (bind them as \
         parameters, or review and add to SQL_INTERPOLATION_ALLOWED):\n{}",
        offenders.join("\n")
    );
}

fn regex_lite_sql() -> impl Fn(&str) -> bool {
    |s: &str| {
        let up = s.to_ascii_uppercase();
        // `UPDATE t SET`, not a message naming `convapi … update ID`.
        let update = up.match_indices("UPDATE ").any(|(i, _)| {
            let mut words = up[i + 7..].split_whitespace();
            words.next().is_some() && words.next() == Some("SET")
        });
        // `DELETE FROM t`, not a message saying what `site delete` deletes.
        update
            || [
                "SELECT ",
                "INSERT ",
                "DELETE FROM",
                "PRAGMA ",
                "CREATE ",
                "DROP ",
                " WHERE ",
            ]
            .iter()
            .any(|k| up.contains(k))
    }
}

fn walk(dir: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn injection_attempts_are_stored_verbatim() {
    let app = TestApp::start();
    let client = "x' OR '1'='1\"; --";
    let order = "o'); DROP TABLE conversions; --";
    app.identify("v-inj'--", client, now_ms() - 60_000);
    let (event, _) = app
        .post_conversion(&json!({"clientId": client, "orderId": order, "type": "purchase"}))
        .accepted();
    let status = app.order_status(order).expect(200);
    assert_eq!(status["orderId"], json!(order));
    assert_eq!(status["eventId"], json!(event));
    assert_eq!(
        app.query_str("SELECT client_id FROM conversions WHERE id = ?1", &[&event]),
        Some(client.to_owned())
    );
    assert_eq!(
        app.query_str(
            "SELECT visitor_id FROM conversions WHERE id = ?1",
            &[&event]
        ),
        Some("v-inj'--".to_owned())
    );
    // A LIKE-style wildcard and a quote in the path match nothing else.
    expect_error(&app.order_status("%"), 404, "ORDER_NOT_FOUND");
    expect_error(&app.order_status("' OR 1=1 --"), 404, "ORDER_NOT_FOUND");
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}

#[test]
fn tenants_are_isolated_on_both_endpoints() {
    let app = TestApp::start();
    app.pageview("v-iso", "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(&json!({"visitorId": "v-iso", "orderId": "A-1"}))
        .accepted();
    let b = app.create_tenant("Other tenant");
    let b_site = app.create_site(&b.id, "B site", &[]);
    let b_key = app.create_key(&b.id);
    // B's key on A's site: 403 on both endpoints, whether the order exists or not.
    expect_error(
        &app.post_conversion_as(
            &b_key.key,
            &app.site.id,
            &json!({"visitorId": "v-iso", "orderId": "A-1"}),
        ),
        403,
        "FORBIDDEN",
    );
    expect_error(
        &app.order_status_as(&b_key.key, &app.site.id, "A-1"),
        403,
        "FORBIDDEN",
    );
    expect_error(
        &app.order_status_as(&b_key.key, &app.site.id, "nope"),
        403,
        "FORBIDDEN",
    );
    // B's key on its own site does not see A's order; A's visitor is unknown there.
    expect_error(
        &app.order_status_as(&b_key.key, &b_site.id, "A-1"),
        404,
        "ORDER_NOT_FOUND",
    );
    expect_error(
        &app.post_conversion_as(
            &b_key.key,
            &b_site.id,
            &json!({"visitorId": "v-iso", "orderId": "A-1"}),
        ),
        422,
        "NO_SESSION",
    );
    // A's key on B's site: 403 as well.
    expect_error(
        &app.post_conversion_as(
            &app.key.key,
            &b_site.id,
            &json!({"visitorId": "v-iso", "orderId": "B-1"}),
        ),
        403,
        "FORBIDDEN",
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}

#[test]
fn revoked_keys_and_malformed_authorization_get_401_on_both_endpoints() {
    let app = TestApp::start();
    app.pageview("v-rev", "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(&json!({"visitorId": "v-rev", "orderId": "R-1"}))
        .accepted();
    let k = app.create_key(&app.tenant.id);
    app.order_status_as(&k.key, &app.site.id, "R-1").expect(200);
    app.revoke_key(&k.id);
    expect_error(
        &app.post_conversion_as(
            &k.key,
            &app.site.id,
            &json!({"visitorId": "v-rev", "orderId": "R-2"}),
        ),
        401,
        "UNAUTHORIZED",
    );
    expect_error(
        &app.order_status_as(&k.key, &app.site.id, "R-1"),
        401,
        "UNAUTHORIZED",
    );
    let url = format!("{}/api/sites/{}/conversions/R-1", app.base, app.site.id);
    let key = app.key.key.clone();
    for auth in [
        String::new(),
        "Bearer".into(),
        "Bearer ".into(),
        format!("Basic {key}"),
        format!("Bearer {key}x"),
        format!("Bearer {}", &key[4..]),
        format!("Bearer {}", key.to_uppercase()),
        format!("Token {key}"),
    ] {
        let headers: Vec<(&str, &str)> = if auth.is_empty() {
            vec![]
        } else {
            vec![("Authorization", auth.as_str())]
        };
        let r = send(&agent(), "GET", &url, &headers, None);
        expect_error(&r, 401, "UNAUTHORIZED");
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}
