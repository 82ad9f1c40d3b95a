//! `POST /api/sites/{siteId}/conversions` through the front door: every row of the checks table of
//! docs/decisions.md §3 (status and code, and the order in which the checks answer), every field
//! rule with the `field` it names, what `null`/unknown fields/charset do, the order status
//! endpoint's auth rules, and 404/405 routing. Session resolution lives in `sessions.rs`,
//! deduplication in `idempotency.rs`, key storage in `keys.rs`.

use crate::common::*;
use serde_json::{json, Map, Value};

const JSON: &str = "application/json";

/// A body that is accepted as is on an app where [`known_visitor`] ran.
fn valid() -> Value {
    json!({"visitorId": "v-known", "orderId": unique("order"), "value": 10, "currency": "EUR"})
}

/// Gives the app a visitor `v-known` with a session that started an hour ago.
fn known_visitor(app: &TestApp) -> String {
    app.pageview("v-known", "https://shop.example/", now_ms() - HOUR)
}

/// `base` with each `(name, value)` of `patch` set (`Value::Null` sets JSON null) and the members
/// named in `remove` deleted.
fn with(base: &Value, patch: &[(&str, Value)], remove: &[&str]) -> Value {
    let mut m: Map<String, Value> = base.as_object().expect("object").clone();
    for (k, v) in patch {
        m.insert((*k).to_owned(), v.clone());
    }
    for k in remove {
        m.remove(*k);
    }
    Value::Object(m)
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// A valid JSON object of exactly `len` bytes.
fn padded_body(len: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"visitorId":"v-known","orderId":"{}","pad":""#,
        unique("big")
    );
    let tail = r#""}"#;
    let mut s = head;
    s.push_str(&"x".repeat(len - s.len() - tail.len()));
    s.push_str(tail);
    assert_eq!(s.len(), len);
    s.into_bytes()
}

struct Case {
    name: &'static str,
    auth: Option<String>,
    site: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

#[test]
fn every_row_of_the_contract_table_answers_its_status_and_code_in_order() {
    let app = TestApp::start();
    known_visitor(&app);
    let key = app.key.key.clone();
    let site = app.site.id.clone();

    let revoked = app.create_key(&app.tenant.id);
    app.revoke_key(&revoked.id);
    let other_tenant = app.create_tenant("Other tenant");
    let other_site = app.create_site(&other_tenant.id, "Other site", &[]);
    let unknown_site = "8d3f9f8e-3c1b-4d55-9a57-0a1f2b3c4d5e".to_string();
    let unknown_key = format!("ask_{}", "A".repeat(40));

    let ok = serde_json::to_vec(&valid()).unwrap();
    let garbage = b"this is not json".to_vec();
    let too_big = padded_body(64 * 1024 + 1);
    let no_session = br#"{"clientId":"nobody","orderId":"N-1"}"#.to_vec();
    let no_order = br#"{"clientId":"nobody"}"#.to_vec();

    let c = |name, auth: Option<&str>, site: &str, ct, body: &[u8], status, code| Case {
        name,
        auth: auth.map(str::to_owned),
        site: site.to_owned(),
        content_type: ct,
        body: body.to_vec(),
        status,
        code,
    };
    let k = Some(bearer(&key));
    let k = k.as_deref();
    let cases = vec![
        // 1: 401, before anything else is looked at.
        c(
            "no Authorization",
            None,
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "empty bearer",
            Some("Bearer "),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "Basic scheme",
            Some(&format!("Basic {key}")),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "key without Bearer",
            Some(&key),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "unknown key",
            Some(&bearer(&unknown_key)),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "key without ask_",
            Some(&bearer(&key[4..])),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "key with a changed last char",
            // Regression: appending a fixed `x` left the key unchanged when it already ended in `x`.
            Some(&bearer(&format!(
                "{}{}",
                &key[..key.len() - 1],
                if key.ends_with('x') { 'y' } else { 'x' }
            ))),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "revoked key",
            Some(&bearer(&revoked.key)),
            &site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "401 before 404",
            None,
            &unknown_site,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "401 before 403",
            Some(&bearer(&unknown_key)),
            &other_site.id,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "401 before 413",
            None,
            &site,
            Some(JSON),
            &too_big,
            401,
            "UNAUTHORIZED",
        ),
        c(
            "401 before 415/400",
            None,
            &site,
            Some("text/plain"),
            &garbage,
            401,
            "UNAUTHORIZED",
        ),
        // 2: 404 SITE_NOT_FOUND.
        c(
            "site id not a UUID",
            k,
            "not-a-uuid",
            Some(JSON),
            &ok,
            404,
            "SITE_NOT_FOUND",
        ),
        c(
            "unknown site UUID",
            k,
            &unknown_site,
            Some(JSON),
            &ok,
            404,
            "SITE_NOT_FOUND",
        ),
        c(
            "tracker id is not a site id",
            k,
            &app.site.tracker_id,
            Some(JSON),
            &ok,
            404,
            "SITE_NOT_FOUND",
        ),
        c(
            "404 before 413",
            k,
            &unknown_site,
            Some(JSON),
            &too_big,
            404,
            "SITE_NOT_FOUND",
        ),
        c(
            "404 before 415/400",
            k,
            &unknown_site,
            Some("text/plain"),
            &garbage,
            404,
            "SITE_NOT_FOUND",
        ),
        // 3: 403 FORBIDDEN.
        c(
            "another tenant's site",
            k,
            &other_site.id,
            Some(JSON),
            &ok,
            403,
            "FORBIDDEN",
        ),
        c(
            "403 before 413",
            k,
            &other_site.id,
            Some(JSON),
            &too_big,
            403,
            "FORBIDDEN",
        ),
        c(
            "403 before 415/400",
            k,
            &other_site.id,
            None,
            &garbage,
            403,
            "FORBIDDEN",
        ),
        // 4: 413.
        c(
            "body of 64 KiB + 1",
            k,
            &site,
            Some(JSON),
            &too_big,
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        c(
            "413 before 415",
            k,
            &site,
            Some("text/plain"),
            &too_big,
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        // 5: 415.
        c(
            "no Content-Type",
            k,
            &site,
            None,
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        c(
            "text/plain",
            k,
            &site,
            Some("text/plain"),
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        c(
            "form encoded",
            k,
            &site,
            Some("application/x-www-form-urlencoded"),
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        c(
            "application/jsonx",
            k,
            &site,
            Some("application/jsonx"),
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        c(
            "415 before 400",
            k,
            &site,
            Some("text/plain"),
            &garbage,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        // 6: 400 INVALID_JSON.
        c(
            "not JSON",
            k,
            &site,
            Some(JSON),
            &garbage,
            400,
            "INVALID_JSON",
        ),
        c("empty body", k, &site, Some(JSON), b"", 400, "INVALID_JSON"),
        c(
            "a JSON array",
            k,
            &site,
            Some(JSON),
            b"[{\"visitorId\":\"v-known\"}]",
            400,
            "INVALID_JSON",
        ),
        c(
            "a JSON string",
            k,
            &site,
            Some(JSON),
            b"\"hello\"",
            400,
            "INVALID_JSON",
        ),
        c(
            "JSON null",
            k,
            &site,
            Some(JSON),
            b"null",
            400,
            "INVALID_JSON",
        ),
        c(
            "truncated object",
            k,
            &site,
            Some(JSON),
            b"{\"visitorId\":\"v-known\"",
            400,
            "INVALID_JSON",
        ),
        c(
            "trailing garbage",
            k,
            &site,
            Some(JSON),
            b"{\"visitorId\":\"v-known\",\"orderId\":\"T\"} x",
            400,
            "INVALID_JSON",
        ),
        c(
            "NaN literal",
            k,
            &site,
            Some(JSON),
            b"{\"visitorId\":\"v-known\",\"orderId\":\"T\",\"value\":NaN}",
            400,
            "INVALID_JSON",
        ),
        c(
            "400 INVALID_JSON before VALIDATION_ERROR",
            k,
            &site,
            Some(JSON),
            b"[{\"orderId\":1}]",
            400,
            "INVALID_JSON",
        ),
        // 7: 400 VALIDATION_ERROR, before any session lookup.
        c(
            "validation before 422",
            k,
            &site,
            Some(JSON),
            &no_order,
            400,
            "VALIDATION_ERROR",
        ),
        // 8: 422.
        c(
            "no session resolvable",
            k,
            &site,
            Some(JSON),
            &no_session,
            422,
            "NO_SESSION",
        ),
    ];
    for case in &cases {
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = &case.auth {
            headers.push(("Authorization", a));
        }
        if let Some(ct) = case.content_type {
            headers.push(("Content-Type", ct));
        }
        let r = app.post_conversion_raw(&headers, &case.site, &case.body);
        assert_eq!(
            (r.status, r.json()["code"].as_str().map(str::to_owned)),
            (case.status, Some(case.code.to_owned())),
            "case {:?}: body {}",
            case.name,
            r.text()
        );
        expect_error(&r, case.status, case.code);
    }
    // None of the refused requests wrote a conversion.
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);

    // The success row: 202 with exactly the body of docs/decisions.md §3, and it is stored.
    let r = app.post_conversion_raw(
        &[("Authorization", &bearer(&key)), ("Content-Type", JSON)],
        &site,
        &ok,
    );
    let (event_id, _) = r.accepted();
    let v = r.json();
    let mut members: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    members.sort();
    assert_eq!(members, ["eventId", "sessionId", "success"]);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE id = ?1",
            &[&event_id]
        ),
        1
    );
}

#[test]
fn a_body_of_exactly_64_kib_is_accepted() {
    let app = TestApp::start();
    known_visitor(&app);
    let r = app.post_conversion_raw(
        &[
            ("Authorization", &bearer(&app.key.key)),
            ("Content-Type", JSON),
        ],
        &app.site.id,
        &padded_body(64 * 1024),
    );
    r.accepted();
}

#[test]
fn a_value_beyond_the_range_of_a_float_is_a_validation_error_on_value() {
    // Valid JSON numbers that are not finite as doubles: docs/decisions.md §3 asks for a finite
    // number, so these are field errors (400 VALIDATION_ERROR on `value`), not unreadable JSON.
    let app = TestApp::start();
    known_visitor(&app);
    let post = |number: &str| {
        let body = format!(
            r#"{{"visitorId": "v-known", "orderId": "{}", "value": {number}, "currency": "EUR"}}"#,
            unique("huge")
        );
        app.post_conversion_raw(
            &[
                ("Authorization", &bearer(&app.key.key)),
                ("Content-Type", JSON),
            ],
            &app.site.id,
            body.as_bytes(),
        )
    };
    for number in ["1e400", "-1e400", "1.5e309", "123456789e999999"] {
        let r = post(number);
        assert_eq!(r.status, 400, "value {number}");
        expect_invalid(&r, "value");
    }
    // More digits than a double keeps, within the range: accepted.
    post("12.500000000000000000000000001").accepted();
}

#[test]
fn every_field_rule_names_its_field() {
    let app = TestApp::start();
    known_visitor(&app);
    let base = valid();
    // The base body is accepted, so each refusal below is caused by its patch alone.
    app.post_conversion(&base).accepted();

    let long = "x".repeat(257);
    let long_multibyte = "é".repeat(257);
    let future = iso(now_ms() + 10 * MINUTE);
    let cases: Vec<(&str, Value, &str)> = vec![
        // At least one identifier.
        (
            "no identifier",
            with(&base, &[], &["visitorId"]),
            "clientId",
        ),
        (
            "identifiers all null",
            with(
                &base,
                &[
                    ("clientId", Value::Null),
                    ("visitorId", Value::Null),
                    ("sessionId", Value::Null),
                ],
                &[],
            ),
            "clientId",
        ),
        // orderId on purchases.
        (
            "purchase by default without orderId",
            with(&base, &[], &["orderId"]),
            "orderId",
        ),
        (
            "explicit purchase without orderId",
            with(&base, &[("type", json!("purchase"))], &["orderId"]),
            "orderId",
        ),
        (
            "null type is a purchase",
            with(
                &base,
                &[("type", Value::Null), ("orderId", Value::Null)],
                &[],
            ),
            "orderId",
        ),
        // value.
        (
            "negative value",
            with(&base, &[("value", json!(-1))], &[]),
            "value",
        ),
        (
            "slightly negative value",
            with(&base, &[("value", json!(-0.000001))], &[]),
            "value",
        ),
        (
            "value over 1e12",
            with(&base, &[("value", json!(1_000_000_000_001u64))], &[]),
            "value",
        ),
        (
            "value 1e13",
            with(&base, &[("value", json!(1e13))], &[]),
            "value",
        ),
        (
            "value f64::MAX",
            with(&base, &[("value", json!(f64::MAX))], &[]),
            "value",
        ),
        (
            "value as a string",
            with(&base, &[("value", json!("10"))], &[]),
            "value",
        ),
        (
            "value as a bool",
            with(&base, &[("value", json!(true))], &[]),
            "value",
        ),
        (
            "value as an array",
            with(&base, &[("value", json!([10]))], &[]),
            "value",
        ),
        (
            "value as an object",
            with(&base, &[("value", json!({"amount": 10}))], &[]),
            "value",
        ),
        // currency.
        (
            "lower-case currency",
            with(&base, &[("currency", json!("eur"))], &[]),
            "currency",
        ),
        (
            "four letters",
            with(&base, &[("currency", json!("EURO"))], &[]),
            "currency",
        ),
        (
            "two letters",
            with(&base, &[("currency", json!("EU"))], &[]),
            "currency",
        ),
        (
            "unknown code",
            with(&base, &[("currency", json!("XYZ"))], &[]),
            "currency",
        ),
        (
            "digit in code",
            with(&base, &[("currency", json!("E1R"))], &[]),
            "currency",
        ),
        (
            "empty currency",
            with(&base, &[("currency", json!(""))], &[]),
            "currency",
        ),
        (
            "numeric currency",
            with(&base, &[("currency", json!(978))], &[]),
            "currency",
        ),
        // type.
        (
            "capitalised type",
            with(&base, &[("type", json!("Purchase"))], &[]),
            "type",
        ),
        (
            "type starting with a digit",
            with(&base, &[("type", json!("1lead"))], &[]),
            "type",
        ),
        (
            "type starting with _",
            with(&base, &[("type", json!("_lead"))], &[]),
            "type",
        ),
        (
            "type with a dash",
            with(&base, &[("type", json!("lead-gen"))], &[]),
            "type",
        ),
        (
            "type with a space",
            with(&base, &[("type", json!("sign up"))], &[]),
            "type",
        ),
        (
            "empty type",
            with(&base, &[("type", json!(""))], &[]),
            "type",
        ),
        (
            "type of 65 chars",
            with(&base, &[("type", json!("a".repeat(65)))], &[]),
            "type",
        ),
        (
            "numeric type",
            with(&base, &[("type", json!(1))], &[]),
            "type",
        ),
        // occurredAt.
        (
            "occurredAt in words",
            with(&base, &[("occurredAt", json!("yesterday"))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt date only",
            with(&base, &[("occurredAt", json!("2025-01-01"))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt without offset",
            with(&base, &[("occurredAt", json!("2025-01-01T10:00:00"))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt month 13",
            with(&base, &[("occurredAt", json!("2025-13-01T10:00:00Z"))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt empty",
            with(&base, &[("occurredAt", json!(""))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt as epoch number",
            with(&base, &[("occurredAt", json!(1_763_800_000_000i64))], &[]),
            "occurredAt",
        ),
        (
            "occurredAt 10 minutes ahead",
            with(&base, &[("occurredAt", json!(future))], &[]),
            "occurredAt",
        ),
        // Over-long strings (characters, not bytes).
        (
            "clientId of 257 chars",
            with(&base, &[("clientId", json!(long))], &[]),
            "clientId",
        ),
        (
            "clientId of 257 multibyte chars",
            with(&base, &[("clientId", json!(long_multibyte))], &[]),
            "clientId",
        ),
        (
            "visitorId of 257 chars",
            with(&base, &[("visitorId", json!(long))], &[]),
            "visitorId",
        ),
        (
            "sessionId of 257 chars",
            with(&base, &[("sessionId", json!(long))], &[]),
            "sessionId",
        ),
        (
            "orderId of 257 chars",
            with(&base, &[("orderId", json!(long))], &[]),
            "orderId",
        ),
        // Empty strings.
        (
            "empty clientId",
            with(&base, &[("clientId", json!(""))], &[]),
            "clientId",
        ),
        (
            "empty visitorId",
            with(&base, &[("visitorId", json!(""))], &[]),
            "visitorId",
        ),
        (
            "empty sessionId",
            with(&base, &[("sessionId", json!(""))], &[]),
            "sessionId",
        ),
        (
            "empty orderId",
            with(&base, &[("orderId", json!(""))], &[]),
            "orderId",
        ),
        // Wrong JSON types.
        (
            "numeric clientId",
            with(&base, &[("clientId", json!(42))], &[]),
            "clientId",
        ),
        (
            "boolean visitorId",
            with(&base, &[("visitorId", json!(true))], &[]),
            "visitorId",
        ),
        (
            "object sessionId",
            with(&base, &[("sessionId", json!({}))], &[]),
            "sessionId",
        ),
        (
            "numeric orderId",
            with(&base, &[("orderId", json!(1001))], &[]),
            "orderId",
        ),
        (
            "array orderId",
            with(&base, &[("orderId", json!(["A-1"]))], &[]),
            "orderId",
        ),
    ];
    for (name, body, field) in &cases {
        let r = app.post_conversion(body);
        assert_eq!(
            (r.status, r.json()["field"].as_str().map(str::to_owned)),
            (400, Some(field.to_string())),
            "case {name:?}: body {}",
            r.text()
        );
        expect_invalid(&r, field);
    }
    // Only the base body was stored.
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}

#[test]
fn values_on_the_edges_of_the_rules_are_accepted_and_stored_as_sent() {
    let app = TestApp::start();
    known_visitor(&app);
    let base = valid();
    let stored = |event_id: &str, col: &str| {
        app.query_str(
            &format!("SELECT CAST({col} AS TEXT) FROM conversions WHERE id = ?1"),
            &[&event_id],
        )
    };
    // Each body gets its own order (a repeated order would answer the first one's eventId).
    let accept = |body: Value| -> String {
        let body = match body.get("orderId") {
            Some(Value::String(o)) if *o == base["orderId"] => {
                with(&body, &[("orderId", json!(unique("edge")))], &[])
            }
            _ => body,
        };
        app.post_conversion(&body).accepted().0
    };

    let e = accept(with(&base, &[("value", json!(0))], &[]));
    assert_eq!(stored(&e, "value").as_deref(), Some("0"));
    let e = accept(with(&base, &[("value", json!(1e12))], &[]));
    assert_eq!(
        stored(&e, "value").and_then(|v| v.parse::<f64>().ok()),
        Some(1e12)
    );
    let e = accept(with(&base, &[("value", json!(49.99))], &[]));
    assert_eq!(stored(&e, "value").as_deref(), Some("49.99"));
    let e = accept(with(&base, &[("currency", json!("JPY"))], &[]));
    assert_eq!(stored(&e, "currency").as_deref(), Some("JPY"));
    // Defaults: USD, purchase.
    let e = accept(with(&base, &[], &["currency"]));
    assert_eq!(stored(&e, "currency").as_deref(), Some("USD"));
    assert_eq!(stored(&e, "type").as_deref(), Some("purchase"));
    // Any well-formed type name is a conversion type, and needs no orderId.
    let e = accept(with(&base, &[("type", json!("lead"))], &["orderId"]));
    assert_eq!(stored(&e, "type").as_deref(), Some("lead"));
    assert_eq!(stored(&e, "order_id"), None);
    accept(with(&base, &[("type", json!("a".repeat(64)))], &[]));
    // 256 characters are allowed, counted as characters.
    let e = accept(with(&base, &[("orderId", json!("é".repeat(256)))], &[]));
    assert_eq!(stored(&e, "order_id"), Some("é".repeat(256)));
    accept(with(&base, &[("clientId", json!("c".repeat(256)))], &[]));
    // occurredAt: up to five minutes ahead is fine; offsets are honoured.
    accept(with(
        &base,
        &[("occurredAt", json!(iso(now_ms() + MINUTE)))],
        &[],
    ));
    let at = (now_ms() - 30 * MINUTE) / 1000 * 1000;
    let plus_two = chrono::DateTime::from_timestamp_millis(at)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339();
    assert!(plus_two.ends_with("+02:00"), "{plus_two}");
    let e = accept(with(&base, &[("occurredAt", json!(plus_two))], &[]));
    assert_eq!(stored(&e, "occurred_at"), Some(at.to_string()));
}

#[test]
fn null_counts_as_absent_and_unknown_fields_are_ignored() {
    let app = TestApp::start();
    let session = known_visitor(&app);
    let before = now_ms();
    let r = app.post_conversion(&json!({
        "clientId": null,
        "visitorId": "v-known",
        "sessionId": null,
        "orderId": "N-1",
        "type": null,
        "value": null,
        "currency": null,
        "occurredAt": null,
        "coupon": "SPRING",
        "items": [{"sku": "A", "qty": 2, "nested": {"deeper": [1, 2, {"x": null}]}}],
        "Value": "not the value field",
    }));
    let (event_id, session_id) = r.accepted();
    let after = now_ms();
    assert_eq!(session_id, session);
    let row = app.rows(
        "SELECT type, value, currency, occurred_at FROM conversions WHERE id = ?1",
        &[&event_id],
    );
    let [kind, value, currency, occurred] = &row[0][..] else {
        panic!("{row:?}")
    };
    let occurred = occurred.as_i64().expect("occurred_at");
    assert_eq!(kind, "purchase");
    assert_eq!(value, &Value::Null);
    assert_eq!(currency, "USD");
    assert!(
        (before - 1000..=after + 1000).contains(&occurred),
        "occurredAt defaults to the time of the call: {occurred} not in [{before}, {after}]"
    );
}

#[test]
fn content_type_parameters_and_case_are_accepted() {
    let app = TestApp::start();
    known_visitor(&app);
    for ct in [
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "Application/JSON",
    ] {
        let r = app.post_conversion_raw(
            &[
                ("Authorization", &bearer(&app.key.key)),
                ("Content-Type", ct),
            ],
            &app.site.id,
            &serde_json::to_vec(&valid()).unwrap(),
        );
        assert_eq!(r.status, 202, "Content-Type {ct:?}: {}", r.text());
    }
}

#[test]
fn invalid_utf8_and_deep_nesting_are_invalid_json_and_harmless() {
    let app = TestApp::start();
    known_visitor(&app);
    let headers = [
        ("Authorization", bearer(&app.key.key)),
        ("Content-Type", JSON.to_owned()),
    ];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let post = |body: &[u8]| app.post_conversion_raw(&headers, &app.site.id, body);

    let mut bodies: Vec<(&str, Vec<u8>)> = vec![
        (
            "invalid UTF-8 in a value",
            b"{\"visitorId\":\"v-known\",\"orderId\":\"\xff\xfe\"}".to_vec(),
        ),
        (
            "invalid UTF-8 in a key",
            b"{\"visitorId\":\"v-known\",\"orderId\":\"U-1\",\"\xc3\x28\":1}".to_vec(),
        ),
        (
            "overlong UTF-8 encoding",
            b"{\"visitorId\":\"v-known\",\"orderId\":\"\xc0\xaf\"}".to_vec(),
        ),
        (
            "UTF-16 body",
            "{\"visitorId\":\"v-known\",\"orderId\":\"U-2\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
    ];
    // Just past the nesting limit, hidden in an unknown field.
    let depth = 64;
    bodies.push((
        "64 nested arrays",
        format!(
            "{{\"visitorId\":\"v-known\",\"orderId\":\"D-1\",\"x\":{}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        )
        .into_bytes(),
    ));
    bodies.push((
        "64 nested objects",
        format!(
            "{{\"visitorId\":\"v-known\",\"orderId\":\"D-2\",\"x\":{}1{}}}",
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        )
        .into_bytes(),
    ));
    // Deep enough to overflow a recursive parser's stack, still under the body limit.
    bodies.push((
        "60000 open brackets",
        format!("{{\"x\":{}", "[".repeat(60_000)).into_bytes(),
    ));
    for (name, body) in &bodies {
        let r = post(body);
        assert_eq!(r.status, 400, "case {name:?}: {}", r.text());
        expect_error(&r, 400, "INVALID_JSON");
    }
    // Shallow nesting in an unknown field is fine, and the server survived all of the above.
    let r = post(
        format!(
            "{{\"visitorId\":\"v-known\",\"orderId\":\"D-3\",\"x\":{}{}}}",
            "[".repeat(8),
            "]".repeat(8)
        )
        .as_bytes(),
    );
    r.accepted();
    assert_eq!(app.get("/healthz").expect(200), json!({"status": "ok"}));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}

#[test]
fn a_busy_database_answers_503_with_retry_after_and_nothing_is_half_written() {
    if sqlite_only(
        "SQLite's write lock held against --busy-timeout-ms (on PostgreSQL: backpressure::a_lock_held_by_another_session_answers_503_in_time_and_healthz_at_once)",
    ) {
        return;
    }
    let app = TestApp::start();
    known_visitor(&app);
    // A first request records the key's lastUsedAt, so the next one needs exactly one write.
    app.post_conversion(&valid()).accepted();

    // Hold SQLite's write lock from outside the server: its writer waits its busy timeout, then
    // gives up. Reads still work (WAL), so checks 1 to 8 (docs/decisions.md §3) are answered as
    // usual meanwhile.
    let lock = app.sqlite();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    expect_error(
        &app.post_conversion(&json!({"clientId": "nobody", "orderId": "L-0"})),
        422,
        "NO_SESSION",
    );
    let order = unique("busy");
    let body = with(&valid(), &[("orderId", json!(order))], &[]);
    let r = app.post_conversion(&body);
    expect_error(&r, 503, "QUEUE_UNAVAILABLE");
    let retry_after = r.header("Retry-After").expect("Retry-After header");
    assert!(
        retry_after.trim().parse::<u64>().is_ok(),
        "Retry-After is delay-seconds: {retry_after:?}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);

    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE order_id = ?1",
            &[&order]
        ),
        0,
        "a 503 wrote nothing"
    );
    // The retry the 503 asks for succeeds, once.
    let (event_id, _) = app.post_conversion(&body).accepted();
    // One statement, so one snapshot: the pipeline may finish the item between two queries.
    assert_eq!(
        app.query_i64(
            "SELECT (SELECT COUNT(*) FROM conversions c JOIN outbox o ON o.conversion_id = c.id
                     WHERE c.order_id = ?1)
                  + (SELECT COUNT(*) FROM conversions
                     WHERE order_id = ?1 AND status IN ('processed', 'failed'))",
            &[&order]
        ),
        1,
        // fx_pending keeps its outbox row until rates arrive; only a finished item has none.
        "one conversion with its outbox row (or already finished)"
    );
    assert_eq!(
        app.order_status(&order).expect(200)["eventId"],
        json!(event_id)
    );
}

#[test]
fn the_order_status_endpoint_applies_the_same_auth_rules() {
    let app = TestApp::start();
    known_visitor(&app);
    let order = unique("status");
    let (event_id, session_id) = app
        .post_conversion(&with(&valid(), &[("orderId", json!(order))], &[]))
        .accepted();
    let revoked = app.create_key(&app.tenant.id);
    app.revoke_key(&revoked.id);
    let other = app.create_tenant("Other");
    let other_site = app.create_site(&other.id, "Other site", &[]);
    let other_key = app.create_key(&other.id);

    let get = |auth: Option<&str>, site: &str, order: &str| {
        let path = format!("/api/sites/{site}/conversions/{}", encode_segment(order));
        match auth {
            Some(a) => app.send("GET", &path, &[("Authorization", a)], None),
            None => app.send("GET", &path, &[], None),
        }
    };
    let k = bearer(&app.key.key);
    let cases: Vec<(&str, Resp, u16, &str)> = vec![
        (
            "no key",
            get(None, &app.site.id, &order),
            401,
            "UNAUTHORIZED",
        ),
        (
            "revoked key",
            get(Some(&bearer(&revoked.key)), &app.site.id, &order),
            401,
            "UNAUTHORIZED",
        ),
        (
            "bad site id",
            get(Some(&k), "nope", &order),
            404,
            "SITE_NOT_FOUND",
        ),
        (
            "other tenant's site",
            get(Some(&k), &other_site.id, &order),
            403,
            "FORBIDDEN",
        ),
        (
            "other tenant's key",
            get(Some(&bearer(&other_key.key)), &app.site.id, &order),
            403,
            "FORBIDDEN",
        ),
        (
            "unknown order",
            get(Some(&k), &app.site.id, "no-such-order"),
            404,
            "ORDER_NOT_FOUND",
        ),
        (
            "order of another site",
            get(Some(&bearer(&other_key.key)), &other_site.id, &order),
            404,
            "ORDER_NOT_FOUND",
        ),
    ];
    for (name, r, status, code) in &cases {
        assert_eq!(r.status, *status, "case {name:?}: {}", r.text());
        expect_error(r, *status, code);
    }
    // Order ids are free text: they travel percent-encoded in the path.
    let odd = "A/1 ü?#%";
    let (odd_event, _) = app
        .post_conversion(&with(&valid(), &[("orderId", json!(odd))], &[]))
        .accepted();
    let v = app.order_status(odd).expect(200);
    assert_eq!(
        (&v["orderId"], &v["eventId"]),
        (&json!(odd), &json!(odd_event))
    );

    let v = app.order_status(&order).expect(200);
    assert_eq!(v["eventId"], json!(event_id));
    assert_eq!(v["sessionId"], json!(session_id));
    assert_eq!(v["orderId"], json!(order));
    assert_eq!(v["type"], json!("purchase"));
    assert_eq!(v["sources"], json!(["api"]));
    assert_eq!(v["currency"], json!("EUR"));
    assert_eq!(v["value"], json!(10));
    assert!(
        ["queued", "fx_pending", "processed", "failed"]
            .contains(&v["status"].as_str().unwrap_or("")),
        "{v}"
    );
}

#[test]
fn unknown_paths_are_404_and_wrong_methods_are_405_with_allow() {
    let app = TestApp::start();
    let site = &app.site.id;
    let auth = bearer(&app.key.key);
    let h = [("Authorization", auth.as_str())];

    for path in [
        "/",
        "/api",
        "/api/sites",
        &format!("/api/sites/{site}"),
        &format!("/api/sites/{site}/conversion"),
        &format!("/api/sites/{site}/conversions/o/extra"),
        "/api/collect/extra",
        "/pixel.jsx",
        "/no/such/thing",
    ] {
        for method in ["GET", "POST"] {
            if (method, path) == ("GET", "/") {
                // The dashboard's entry: a redirect (tests/dashboard.rs).
                continue;
            }
            let r = app.send(method, path, &h, Some(b"{}"));
            assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
            expect_error(&r, 404, "NOT_FOUND");
        }
    }

    let conversions = format!("/api/sites/{site}/conversions");
    let order = format!("/api/sites/{site}/conversions/A-1");
    let cases: Vec<(&str, &str, &str)> = vec![
        ("GET", &conversions, "POST"),
        ("PUT", &conversions, "POST"),
        ("DELETE", &conversions, "POST"),
        ("PATCH", &conversions, "POST"),
        ("POST", &order, "GET"),
        ("DELETE", &order, "GET"),
        ("GET", "/api/collect", "POST"),
        ("PUT", "/api/collect", "POST"),
        ("POST", "/healthz", "GET"),
        ("DELETE", "/pixel.js", "GET"),
        ("POST", "/metrics", "GET"),
    ];
    for (method, path, allowed) in cases {
        let body: Option<&[u8]> = if method == "GET" || method == "DELETE" {
            None
        } else {
            Some(b"{}")
        };
        let r = app.send(method, path, &h, body);
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        expect_error(&r, 405, "METHOD_NOT_ALLOWED");
        let allow: Vec<String> = r
            .header("Allow")
            .unwrap_or_else(|| panic!("{method} {path}: no Allow header"))
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .collect();
        assert!(
            allow.iter().any(|m| m == allowed),
            "{method} {path}: Allow {allow:?}"
        );
        assert!(
            !allow.iter().any(|m| m == method),
            "{method} {path}: Allow {allow:?}"
        );
    }
}

/// Regression: errors a new user meets answered with the generic text; each now names
/// the fix, with the status and code unchanged.
#[test]
fn errors_name_the_fix() {
    let app = TestApp::start();
    known_visitor(&app);
    let body = serde_json::to_vec(&valid()).unwrap();

    // The tracker id where the site id goes.
    let r = app.post_conversion_as(&app.key.key, &app.site.tracker_id, &valid());
    let e = expect_error(&r, 404, "SITE_NOT_FOUND");
    let msg = e["error"].as_str().unwrap();
    assert!(msg.contains("tracker id") && msg.contains("UUID"), "{msg}");
    // Any other id that is no UUID: the URL takes a UUID.
    let r = app.post_conversion_as(&app.key.key, "my-shop", &valid());
    let e = expect_error(&r, 404, "SITE_NOT_FOUND");
    assert!(e["error"].as_str().unwrap().contains("a UUID"), "{e}");

    // The site id where the tracker id goes.
    let r = app.collect(&json!({
        "trackerId": app.site.id,
        "events": [{"type": "pageview", "url": "https://shop.example/"}],
    }));
    let e = expect_error(&r, 404, "SITE_NOT_FOUND");
    let msg = e["error"].as_str().unwrap();
    assert!(
        msg.contains("is a site id") && msg.contains("tracker id"),
        "{msg}"
    );

    // The key without its scheme.
    let r = app.post_conversion_raw(
        &[("Authorization", &app.key.key), ("Content-Type", JSON)],
        &app.site.id,
        &body,
    );
    let e = expect_error(&r, 401, "UNAUTHORIZED");
    assert!(e["error"].as_str().unwrap().contains("Bearer "), "{e}");

    // The key in another API's header.
    let r = app.post_conversion_raw(
        &[("X-Api-Key", &app.key.key), ("Content-Type", JSON)],
        &app.site.id,
        &body,
    );
    let e = expect_error(&r, 401, "UNAUTHORIZED");
    let msg = e["error"].as_str().unwrap();
    assert!(
        msg.contains("Authorization: Bearer ") && msg.contains("X-Api-Key"),
        "{msg}"
    );

    // A lower-case currency, in the API, the pixel's purchases, the CLI and the dashboard.
    let r = app.post_conversion(&with(&valid(), &[("currency", json!("eur"))], &[]));
    let e = expect_invalid(&r, "currency");
    assert!(
        e["error"].as_str().unwrap().contains("upper case: EUR"),
        "{e}"
    );
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id,
        "events": [{"type": "purchase", "orderId": "lc-1", "value": 1, "currency": "eur"}],
    }));
    let e = expect_error(&r, 400, "VALIDATION_ERROR");
    assert!(
        e["error"].as_str().unwrap().contains("upper case: EUR"),
        "{e}"
    );
    let run = app.cli(&[
        "site",
        "create",
        "--tenant",
        &app.tenant.id,
        "--name",
        "x",
        "--currency",
        "eur",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("upper case: EUR"), "{}", run.stderr);
    create_user(
        &app,
        &app.tenant.id,
        "owner@shop.example",
        "correct horse battery",
    );
    let c = DashClient::logged_in(&app, "owner@shop.example", "correct horse battery");
    let csrf = c.csrf();
    let r = c.post_form(
        "/dashboard/sites",
        &[
            ("csrf", &csrf),
            ("name", "Lower"),
            ("currency", "eur"),
            ("window_days", "30"),
            ("model", "last_touch"),
        ],
    );
    assert_eq!(r.status, 400);
    assert!(r.text().contains("upper case: EUR"), "{}", r.text());
}
