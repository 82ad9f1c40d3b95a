//! convapi's outgoing bodies checked against the platforms' own client libraries, not our reading
//! of their docs: a conversion for every mapping rule is sent to a fake Meta and a fake Google
//! Ads, each request caught is written to a temporary directory, and
//! `scripts/check-platform-sdks.py` checks them with Meta's `facebook-business` SDK (every event
//! rebuilt as its `serverside.Event` normalises to what was sent; its hashing of the raw e-mail
//! and phone) and Google's `google-ads` library (the body parses strictly as the path version's
//! `UploadClickConversionsRequest`), and that convapi's default versions are the ones the libraries
//! target, so that a newer pinned library fails here until `forward/versions.rs` moves on. GA4's
//! Measurement Protocol has no published client library or schema: `forward_ga4.rs`' fake checks
//! its documented rules. The libraries come from `scripts/install-test-deps.sh`;
//! without them this test fails, saying what to install.

use std::process::Command;

use serde_json::{json, Value};

use convapi::forward::ga4;
use convapi::forward::google_ads::{self, AdjustmentUpload};
use convapi::forward::hash::{normalise_email, normalise_phone, user_hashes};
use convapi::forward::platform::{AdjustVerdict, Event, Verdict};
use convapi::forward::versions;
use convapi::store::deliveries::Facts;
use convapi::store::destinations::Destination;

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::now_ms;
use crate::forward_meta::{dest, http, meta_dest, platform, purchase};

/// What the backend sent of a person: the raw e-mail and phone, and the phone in E.164 written by
/// hand (the check's truth, independent of convapi's normalisation).
#[derive(Clone, Copy)]
struct Person {
    email: Option<&'static str>,
    phone: Option<(&'static str, &'static str)>,
}

const NOBODY: Person = Person {
    email: None,
    phone: None,
};

/// One conversion of a case, its event name and its person.
struct Conv {
    facts: Facts,
    name: &'static str,
    person: Person,
}

fn conv(mut facts: Facts, name: &'static str, person: Person) -> Conv {
    let email = person
        .email
        .map(|e| normalise_email(e).expect("a valid e-mail"));
    let phone = person
        .phone
        .map(|(raw, _)| normalise_phone(raw).expect("a valid phone"));
    facts.user_hashes = user_hashes(email.as_deref(), phone.as_deref());
    Conv {
        facts,
        name,
        person,
    }
}

fn person_json(p: &Person) -> Value {
    json!({
        "email": p.email,
        "phone": p.phone.map(|(raw, _)| raw),
        "phone_e164": p.phone.map(|(_, e164)| e164),
    })
}

/// A fake answering Meta's events, Google's token endpoint and uploads as taken.
fn fake() -> FakePlatform {
    FakePlatform::start(|r: &Recorded| {
        if r.path() == "/token" {
            Reply::ok(json!({"access_token": "ya29.sdk-check", "expires_in": 3600}))
        } else if r.path().ends_with(":uploadClickConversions")
            || r.path().ends_with(":uploadConversionAdjustments")
        {
            Reply::ok(json!({"results": []}))
        } else if r.path() == "/mp/collect" {
            Reply::Json(204, json!({}), Vec::new())
        } else {
            let n = r.json()["data"].as_array().map_or(0, Vec::len);
            Reply::ok(json!({"events_received": n, "messages": [], "fbtrace_id": "Sdk"}))
        }
    })
}

fn ads_dest(endpoint: &str) -> Destination {
    dest(
        "google_ads",
        endpoint,
        json!({"customer_id": "123-456-7890", "conversion_action": "987654321",
               "client_id": "client.apps.googleusercontent.com"}),
        json!({"developer_token": "dev-token-sdk-check", "client_secret": "client-secret-sdk",
               "refresh_token": "1//refresh-token-sdk-check"}),
    )
}

/// The requests caught so far, written to `dir` as `NN-platform.json`.
struct Capture<'a> {
    dir: &'a std::path::Path,
    fake: &'a FakePlatform,
    n: usize,
}

impl Capture<'_> {
    /// Sends the case's conversions as one request (each must pass the platform's check; the test
    /// event when `test_event`) and writes the request caught, with its people.
    fn take(&mut self, kind: &str, case: &str, d: &Destination, convs: &[Conv], test_event: bool) {
        let (dir, fake) = (self.dir, self.fake);
        let now = now_ms();
        let p = platform(kind);
        let events: Vec<Event> = convs
            .iter()
            .map(|c| Event {
                delivery_id: 1,
                facts: &c.facts,
                name: c.name,
            })
            .collect();
        for e in &events {
            assert_eq!(p.check(d, e, now), None, "{case}: the platform's check");
        }
        let before = fake.requests().len();
        if test_event {
            p.test(&http(), d, &events[0], now)
                .unwrap_or_else(|o| panic!("{case}: {o}"));
        } else {
            let out = p.send(&http(), d, &events, now);
            assert_eq!(
                out.unwrap_or_else(|o| panic!("{case}: {o}")),
                vec![Verdict::Delivered; events.len()],
                "{case}"
            );
        }
        let sent: Vec<Recorded> = fake.requests()[before..]
            .iter()
            .filter(|r| r.path() != "/token")
            .cloned()
            .collect();
        assert_eq!(sent.len(), 1, "{case}: one request");
        self.n += 1;
        let n = self.n;
        let file = json!({
            "platform": kind,
            "case": case,
            "path": sent[0].path(),
            "body": sent[0].json(),
            "people": convs.iter().map(|c| person_json(&c.person)).collect::<Vec<_>>(),
        });
        std::fs::write(
            dir.join(format!("{n:02}-{kind}.json")),
            serde_json::to_string_pretty(&file).unwrap(),
        )
        .unwrap();
    }
}

#[test]
fn every_mapping_rule_sends_what_the_platforms_own_libraries_take() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake();
    let now = now_ms();
    let mut cap = Capture {
        dir: dir.path(),
        fake: &fake,
        n: 0,
    };
    let full = Person {
        email: Some("  John.Doe@GMail.com "),
        phone: Some(("+1 (650) 555-1212", "+16505551212")),
    };
    let trunk = Person {
        email: Some("Anne.Martin@example.fr"),
        phone: Some(("+33 (0)6 12 34 56 78", "+33612345678")),
    };
    let double_zero = Person {
        email: None,
        phone: Some(("0044 20 7946 0958", "+442079460958")),
    };

    // Meta: one case per rule of the mapping (docs/decisions.md §13, "Meta's Conversions API").
    let meta = meta_dest(&fake.url());
    let mut cases: Vec<(&str, Vec<Conv>)> = Vec::new();
    cases.push((
        "a website purchase with everything",
        vec![conv(purchase(1, now), "Purchase", full)],
    ));
    cases.push((
        "a phone written with its trunk prefix (0)",
        vec![conv(purchase(2, now), "Purchase", trunk)],
    ));
    cases.push((
        "a phone with a 00 international prefix",
        vec![conv(purchase(3, now), "Purchase", double_zero)],
    ));
    let mut no_order = purchase(4, now);
    no_order.order_id = None;
    cases.push((
        "no order id: the conversion id",
        vec![conv(no_order, "Purchase", NOBODY)],
    ));
    let mut no_session = purchase(5, now);
    no_session.session = None;
    cases.push((
        "no session: other",
        vec![conv(no_session, "Purchase", full)],
    ));
    let mut no_url = purchase(6, now);
    no_url.session.as_mut().unwrap().landing_url = None;
    cases.push((
        "a session that began without a pageview: other",
        vec![conv(no_url, "Purchase", NOBODY)],
    ));
    let mut no_ua = purchase(7, now);
    no_ua.session.as_mut().unwrap().forwarding.user_agent = None;
    no_ua.session.as_mut().unwrap().forwarding.client_ip = None;
    cases.push((
        "no user agent kept: other",
        vec![conv(no_ua, "Purchase", NOBODY)],
    ));
    let mut clicked = purchase(8, now);
    clicked.session.as_mut().unwrap().fbclid = Some("IwAR3xYzClick".into());
    cases.push((
        "fbc built from the fbclid",
        vec![conv(clicked, "Purchase", NOBODY)],
    ));
    let mut cookie = purchase(9, now);
    cookie.session.as_mut().unwrap().forwarding.fbc =
        Some(format!("fb.1.{}.IwAR3cookie", now - 3_600_000));
    cases.push((
        "fbc from the _fbc cookie",
        vec![conv(cookie, "Purchase", NOBODY)],
    ));
    let mut lead = purchase(10, now);
    lead.value = None;
    lead.conversion_type = "lead".into();
    cases.push(("a lead without a value", vec![conv(lead, "Lead", full)]));
    let mut exact = purchase(11, now);
    exact.value = Some("1234.50".into());
    exact.currency = "JPY".into();
    cases.push((
        "an exact decimal value in another currency",
        vec![conv(exact, "Purchase", NOBODY)],
    ));
    let mut no_consent = purchase(12, now);
    no_consent.consent_ad_user_data = Some(false);
    no_consent.client_id = None;
    cases.push((
        "a batch of three",
        vec![
            conv(purchase(13, now), "Purchase", full),
            conv(purchase(14, now), "Purchase", trunk),
            conv(purchase(15, now), "AddToCart", NOBODY),
        ],
    ));
    for (case, convs) in &cases {
        cap.take("meta", case, &meta, convs, false);
    }
    // Without ads consent nothing is left to match on: nothing is sent at all.
    assert!(platform("meta")
        .check(
            &meta,
            &Event {
                delivery_id: 1,
                facts: &no_consent,
                name: "Purchase"
            },
            now
        )
        .is_some());
    let mut with_code = meta_dest(&fake.url());
    with_code
        .settings
        .insert("test_event_code".into(), json!("TEST4242"));
    cap.take(
        "meta",
        "the test event",
        &with_code,
        &[conv(
            crate::forward_meta::purchase(16, now),
            "Purchase",
            full,
        )],
        true,
    );

    // Google Ads: one case per rule (docs/decisions.md §13, "Google Ads' click conversions").
    let ads = ads_dest(&fake.url());
    let clicked = |i: usize, key: &str| {
        let mut f = purchase(100 + i, now);
        let s = f.session.as_mut().unwrap();
        match key {
            "gbraid" => s.gbraid = Some(format!("gbraid-{i}")),
            "wbraid" => s.wbraid = Some(format!("wbraid-{i}")),
            _ => s.gclid = Some(format!("Cj0KCQ-gclid-{i}")),
        }
        f
    };
    let mut no_value = clicked(5, "gclid");
    no_value.value = None;
    let mut denied = clicked(6, "gclid");
    denied.consent_ad_user_data = Some(false);
    denied.consent_ad_personalization = Some(false);
    let ads_cases: Vec<(&str, Vec<Conv>, bool)> = vec![
        (
            "a gclid purchase with e-mail and phone",
            vec![conv(clicked(1, "gclid"), "purchase", full)],
            false,
        ),
        (
            "a phone written with its trunk prefix (0)",
            vec![conv(clicked(2, "gclid"), "purchase", trunk)],
            false,
        ),
        (
            "a gbraid",
            vec![conv(clicked(3, "gbraid"), "purchase", NOBODY)],
            false,
        ),
        (
            "a wbraid",
            vec![conv(clicked(4, "wbraid"), "purchase", double_zero)],
            false,
        ),
        (
            "no value: the action's default",
            vec![conv(no_value, "purchase", NOBODY)],
            false,
        ),
        (
            "ad_user_data denied: no identifiers",
            vec![conv(denied, "purchase", full)],
            false,
        ),
        (
            "an event name that is an action id",
            vec![conv(clicked(7, "gclid"), "555666777", NOBODY)],
            false,
        ),
        (
            "a batch of three",
            vec![
                conv(clicked(8, "gclid"), "purchase", full),
                conv(clicked(9, "gbraid"), "purchase", trunk),
                conv(clicked(10, "wbraid"), "purchase", NOBODY),
            ],
            false,
        ),
        (
            "the test event (validateOnly)",
            vec![conv(clicked(11, "gclid"), "purchase", full)],
            true,
        ),
    ];
    for (case, convs, test) in &ads_cases {
        cap.take("google_ads", case, &ads, convs, *test);
    }

    // Google Ads' adjustments (docs/decisions.md §13, "Adjustments"): a restatement and a
    // retraction in one upload; GA4's refund event, checked by its documented rules.
    let restated = clicked(20, "gclid");
    let retracted = clicked(21, "gclid");
    let uploads = [
        AdjustmentUpload {
            facts: &restated,
            event_name: "purchase",
            at_ms: now,
            restated: Some("12.34"),
        },
        AdjustmentUpload {
            facts: &retracted,
            event_name: "purchase",
            at_ms: now + 1_000,
            restated: None,
        },
    ];
    let before = fake.requests().len();
    let verdicts = google_ads::send_adjustments(&http(), &ads, &uploads, now).unwrap();
    assert_eq!(verdicts, vec![AdjustVerdict::Delivered; 2]);
    let ga4 = dest(
        "ga4",
        &fake.url(),
        json!({"measurement_id": "G-SDKCHECK"}),
        json!({"api_secret": "ga4-sdk-secret"}),
    );
    let refunded = purchase(22, now);
    assert_eq!(
        ga4::send_refund(&http(), &ga4, &refunded, "19.5", now, now).unwrap(),
        AdjustVerdict::Delivered
    );
    let sent: Vec<Recorded> = fake.requests()[before..]
        .iter()
        .filter(|r| r.path() != "/token")
        .cloned()
        .collect();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    let mapped: Vec<&str> = google_ads::ADJUSTMENT_IN_EFFECT
        .iter()
        .chain(google_ads::ADJUSTMENT_TOO_RECENT)
        .chain([
            &google_ads::ADJUSTMENT_NOT_FOUND,
            &google_ads::ADJUSTMENT_EXPIRED,
        ])
        .copied()
        .collect();
    for (r, platform, case) in [
        (
            &sent[0],
            "google_ads_adjustments",
            "a restatement and a retraction",
        ),
        (&sent[1], "ga4_refund", "a partial refund"),
    ] {
        cap.n += 1;
        let file = json!({"platform": platform, "case": case, "path": r.path(), "body": r.json(),
                          "mapped_errors": mapped});
        std::fs::write(
            dir.path().join(format!("{:02}-{platform}.json", cap.n)),
            serde_json::to_string_pretty(&file).unwrap(),
        )
        .unwrap();
    }

    // The versions convapi sends to by default, which the libraries must target.
    std::fs::write(
        dir.path().join("versions.json"),
        json!({
            "platform": "versions",
            "case": "defaults",
            "meta": versions::default_version("meta"),
            "google_ads": versions::default_version("google_ads"),
            "google_ads_version_gone": convapi::forward::google_ads::VERSION_GONE_CODE,
        })
        .to_string(),
    )
    .unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/check-platform-sdks.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "python3 is needed to check the bodies against the platforms' libraries ({e}): \
                 run scripts/install-test-deps.sh"
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the platforms' libraries refuse what convapi sends (exit {:?}):\n{stderr}",
        out.status.code()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{n} of {n} requests pass", n = cap.n + 1)),
        "{stdout}{stderr}"
    );
}
