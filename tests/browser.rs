//! End to end in a real browser (docs/decisions.md §4): headless Chromium loads a shop page served
//! from a second origin on 127.0.0.1 (so CORS is real), with the snippet of docs/decisions.md §4
//! pointing at a real `convapi serve`. The page calls `identify` before the pixel loads, lands with
//! UTM parameters, tracks a purchase and is left; the backend then reports the same order. Checked:
//! the `_svc_vid` cookie, the session row (landing URL, UTM fields, clientId), the backend's 202
//! with that session, and one conversion with sources `["pixel", "api"]`.
//!
//! Chromium is driven over the Chrome DevTools Protocol with the small sync client of
//! `common/browser.rs`. Without a browser this test fails loudly, in CI and outside it: it never passes
//! without having run. `CONVAPI_CHROMIUM` overrides the browser path; `CONVAPI_BROWSER_SCREENSHOT`
//! (a `.png` path) saves a screenshot of the shop page, for looking at by hand.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::browser::{
    base64_decode, cdp_eval, chromium_path, open_page, poll, Browser, PATIENCE,
};
use crate::common::TestApp;
use serde_json::{json, Value};

const TRACKER_CLIENT: &str = "user-42";
const ORDER_ID: &str = "A-1001";

#[test]
fn pixel_in_chromium_then_backend_report_is_one_conversion() {
    let chromium = chromium_path();
    let app = TestApp::start();
    // The browser reaches convapi through a recording proxy, to see how each batch was sent.
    let proxy = Proxy::start(&app.base);
    let shop = Shop::start(&proxy.base, &app.site.tracker_id);
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();

    let page = open_page(&mut cdp);
    let page = Some(page.as_str());

    // Land with a campaign in the URL.
    let landing = format!(
        "{}/shop/mug?utm_source=newsletter&utm_medium=email&utm_campaign=spring-sale",
        shop.base
    );
    let nav = cdp.call("Page.navigate", json!({"url": landing}), page);
    assert!(nav.get("errorText").is_none(), "navigate failed: {nav}");
    poll("the pixel to load", || {
        cdp_eval(&mut cdp, page, "window.svc && window.svc.v === 1") == json!(true)
    });
    assert_eq!(
        cdp_eval(&mut cdp, page, "window.identifyQueued"),
        json!(true),
        "identify ran on the queue stub, before pixel.js loaded"
    );
    // The first batch (pageview, identify) goes by fetch after the flush delay; the page can read
    // the answer, across origins, only when the collector's CORS headers are right.
    let mut page_session = String::new();
    poll(
        "svc('sessionId') to be known (a CORS-readable collect answer)",
        || match cdp_eval(&mut cdp, page, "svc('sessionId')") {
            Value::String(s) => {
                page_session = s;
                true
            }
            _ => false,
        },
    );
    if let Ok(path) = std::env::var("CONVAPI_BROWSER_SCREENSHOT") {
        let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}), page);
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("screenshot of the shop page: {path}");
    }

    // Timers stand still from here, so the purchase cannot leave by the flush timer: it is still
    // queued when the page goes away, and only pagehide -> sendBeacon can carry it.
    cdp.call(
        "Emulation.setVirtualTimePolicy",
        json!({"policy": "pause"}),
        page,
    );
    // A single-page-app step to the cart (a pageview from the patched history), then the purchase.
    cdp_eval(
        &mut cdp,
        page,
        "history.pushState({}, '', '/shop/cart'); document.getElementById('buy').click()",
    );
    assert_eq!(
        cdp_eval(&mut cdp, page, "window.bought"),
        json!(true),
        "the buy button ran svc('track', 'purchase', ...)"
    );
    let thanks = format!("{}/thanks", shop.base);
    let nav = cdp.call("Page.navigate", json!({"url": thanks}), page);
    assert!(
        nav.get("errorText").is_none(),
        "navigate away failed: {nav}"
    );

    // The beacon arrives: the order becomes known to the server, from the pixel only.
    poll("the pixel's purchase to reach the server", || {
        app.order_status(ORDER_ID).status == 200
    });
    let status = app.order_status(ORDER_ID).expect(200);
    assert_eq!(status["sources"], json!(["pixel"]), "{status}");
    assert_eq!(status["sessionId"], json!(page_session), "{status}");
    let pixel_event_id = status["eventId"].clone();

    // How each batch left, as the collector saw it: sendBeacon sends `Sec-Fetch-Mode: no-cors`,
    // the pixel's fetch sends `cors`.
    let collects = proxy.collects();
    let carrying = |needle: &str| -> Vec<&Seen> {
        collects
            .iter()
            .filter(|r| r.body.contains(needle))
            .collect()
    };
    let purchase = carrying(ORDER_ID);
    assert_eq!(
        purchase.len(),
        1,
        "one request carried the purchase: {collects:#?}"
    );
    assert_eq!(
        purchase[0].header("sec-fetch-mode"),
        Some("no-cors"),
        "the purchase left by sendBeacon on pagehide: {collects:#?}"
    );
    assert!(
        purchase[0]
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "a beacon's string body is text/plain: {collects:#?}"
    );
    let first = carrying(TRACKER_CLIENT);
    assert_eq!(first.len(), 1, "{collects:#?}");
    assert_eq!(
        first[0].header("sec-fetch-mode"),
        Some("cors"),
        "the first batch left by fetch, whose answer gave svc('sessionId'): {collects:#?}"
    );
    assert!(first[0].body.contains("\"pageview\""), "{collects:#?}");

    // The visitor cookie, first-party on the shop's origin, for 13 months.
    let cookies = cdp.call("Storage.getCookies", json!({}), None);
    let vid_cookie = cookies["cookies"]
        .as_array()
        .expect("cookies")
        .iter()
        .find(|c| c["name"] == "_svc_vid")
        .unwrap_or_else(|| panic!("no _svc_vid cookie among {cookies:#}"))
        .clone();
    let visitor_id = vid_cookie["value"]
        .as_str()
        .expect("cookie value")
        .to_owned();
    assert!(!visitor_id.is_empty());
    assert_eq!(vid_cookie["domain"], "127.0.0.1", "{vid_cookie}");
    assert_eq!(vid_cookie["sameSite"], "Lax", "{vid_cookie}");
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expires = vid_cookie["expires"].as_f64().expect("a persistent cookie");
    assert!(
        expires > now_s + 390.0 * 86400.0,
        "_svc_vid lives 13 months: {vid_cookie}"
    );

    // The session, as stored: one session for this visitor, from the landing page.
    let sessions = app.objects(
        "SELECT id, client_id, (SELECT url FROM events WHERE id = landing_event_id) AS landing_url,
                referrer, utm_source, utm_medium, utm_campaign, utm_term, utm_content, gclid, fbclid
         FROM sessions WHERE site_id = ?1 AND visitor_id = ?2",
        &[&app.site.id, &visitor_id],
    );
    assert_eq!(
        sessions,
        vec![json!({
            "id": page_session,
            "client_id": TRACKER_CLIENT,
            "landing_url": landing,
            "referrer": null,
            "utm_source": "newsletter",
            "utm_medium": "email",
            "utm_campaign": "spring-sale",
            "utm_term": null,
            "utm_content": null,
            "gclid": null,
            "fbclid": null,
        })],
        "one session for the cookie's visitor, as svc('sessionId') named it, from the landing page"
    );
    let events = app.objects(
        "SELECT type, name, url FROM events WHERE session_id = ?1 ORDER BY ts, type DESC",
        &[&page_session],
    );
    assert_eq!(
        events,
        vec![
            json!({"type": "pageview", "name": null, "url": landing}),
            json!({"type": "identify", "name": TRACKER_CLIENT, "url": null}),
            json!({"type": "pageview", "name": null, "url": format!("{}/shop/cart", shop.base)}),
        ],
        "both batches' events joined the landing session"
    );
    assert_eq!(
        app.objects(
            "SELECT client_id FROM visitor_clients WHERE site_id = ?1 AND visitor_id = ?2",
            &[&app.site.id, &visitor_id],
        ),
        vec![json!({"client_id": TRACKER_CLIENT})],
        "identify linked the visitor to the clientId"
    );

    // The merchant's backend reports the same order by clientId alone.
    let (event_id, session_id) = app
        .post_conversion(&json!({
            "clientId": TRACKER_CLIENT,
            "orderId": ORDER_ID,
            "value": 49.9,
            "currency": "EUR",
        }))
        .accepted();
    assert_eq!(
        session_id, page_session,
        "the backend's report joins the browser's session"
    );
    assert_eq!(
        json!(event_id),
        pixel_event_id,
        "the original conversion answers"
    );

    let status = app.order_status(ORDER_ID).expect(200);
    assert_eq!(status["sources"], json!(["pixel", "api"]), "{status}");
    assert_eq!(status["eventId"], pixel_event_id, "{status}");
    assert_eq!(
        app.objects(
            "SELECT id, session_id, source_pixel, source_api, value, currency
             FROM conversions WHERE site_id = ?1 AND order_id = ?2",
            &[&app.site.id, &ORDER_ID],
        ),
        vec![json!({
            "id": pixel_event_id,
            "session_id": page_session,
            "source_pixel": 1,
            "source_api": 1,
            "value": "49.9",
            "currency": "EUR",
        })],
        "one order, one conversion, from both sources"
    );

    browser.close(&mut cdp);
}

/// A site that requires consent (docs/decisions.md §13): the pixel, set up with
/// `{consent: 'required'}`, writes no `_svc_vid` cookie and the server counts the visitor
/// cookieless until the page calls `svc('consent', {analytics: true})`; then the cookie is there
/// and the next batch is counted under its id.
#[test]
fn on_a_consent_required_site_the_cookie_comes_only_with_consent() {
    let chromium = chromium_path();
    let app = TestApp::start();
    let site = app.cli_json(&[
        "site",
        "update",
        &app.site.id,
        "--consent-required",
        "on",
        "--json",
    ]);
    assert_eq!(site["consentRequired"], json!(true), "{site}");
    let page_html = format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Consent shop</title>
<script>
  window.svc = window.svc || function () {{ (svc.q = svc.q || []).push(arguments); }};
  svc('init', '{tracker}', {{consent: 'required'}});
  svc('identify', 'user-7');
</script>
<script async src="{base}/pixel.js"></script>
</head><body><h1>Cookies?</h1></body></html>
"#,
        tracker = app.site.tracker_id,
        base = app.base,
    );
    let server = Server::start(move |mut conn| {
        let Some((head, _)) = read_request(&mut conn) else {
            return;
        };
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        let (status, body) = if path.starts_with("/consent") {
            ("200 OK", page_html.as_str())
        } else {
            ("404 Not Found", "not found")
        };
        let _ = write!(
            conn,
            "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let mut browser = Browser::launch(&chromium);
    let mut cdp = browser.connect();
    let page = open_page(&mut cdp);
    let page = Some(page.as_str());
    let url = format!("http://{}/consent/p?gclid=G-1", server.addr);
    let nav = cdp.call("Page.navigate", json!({"url": url}), page);
    assert!(nav.get("errorText").is_none(), "navigate failed: {nav}");
    poll("the pixel to load", || {
        cdp_eval(&mut cdp, page, "window.svc && window.svc.v === 1") == json!(true)
    });
    // The first batch is answered: the pageview reached the server, without consent.
    poll("the first batch's answer", || {
        cdp_eval(&mut cdp, page, "svc('sessionId')").is_string()
    });
    let vid_cookie = |cdp: &mut crate::common::browser::Cdp| -> Option<String> {
        let cookies = cdp.call("Storage.getCookies", json!({}), None);
        cookies["cookies"]
            .as_array()
            .expect("cookies")
            .iter()
            .find(|c| c["name"] == "_svc_vid")
            .map(|c| c["value"].as_str().expect("value").to_owned())
    };
    assert_eq!(vid_cookie(&mut cdp), None, "no cookie before consent");
    assert_eq!(
        cdp_eval(&mut cdp, page, "document.cookie.indexOf('_svc_vid') < 0"),
        json!(true)
    );
    let before = app.objects(
        "SELECT visitor_id, gclid, client_ip, consent_analytics FROM sessions WHERE site_id = ?1",
        &[&app.site.id],
    );
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(
        before[0]["visitor_id"].as_str().unwrap().starts_with("cl-"),
        "a cookieless visitor: {before:?}"
    );
    assert_eq!(
        before[0]["gclid"],
        Value::Null,
        "no click id without ads consent"
    );
    assert_eq!(before[0]["client_ip"], Value::Null);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM visitor_clients", &[]),
        0,
        "identify waits for consent"
    );

    cdp_eval(&mut cdp, page, "svc('consent', {analytics: true}); true");
    let vid = vid_cookie(&mut cdp).expect("the cookie once analytics consent is given");
    assert!(!vid.is_empty() && !vid.starts_with("cl-"), "{vid}");
    // A step in the single-page app: the next batch, with the identify that waited, under the
    // cookie's id.
    cdp_eval(
        &mut cdp,
        page,
        "history.pushState({}, '', '/consent/next'); true",
    );
    poll("the identify to link the cookie's visitor", || {
        app.query_i64(
            "SELECT COUNT(*) FROM visitor_clients WHERE client_id = 'user-7' AND visitor_id = ?1",
            &[&vid],
        ) == 1
    });
    assert_eq!(
        app.rows(
            "SELECT consent_analytics, consent_ads FROM sessions WHERE visitor_id = ?1",
            &[&vid]
        ),
        vec![vec![json!(1), Value::Null]],
        "analytics granted, ads not asked"
    );
    browser.close(&mut cdp);
}

// ---------------------------------------------------------------------------------------------
// The shop: a second origin (another port on 127.0.0.1) serving the merchant's pages.

struct Shop {
    base: String,
    _server: Server,
}

impl Shop {
    fn start(convapi: &str, tracker_id: &str) -> Shop {
        let page = shop_page(convapi, tracker_id);
        let server = Server::start(move |conn| serve_shop(conn, &page));
        Shop {
            base: format!("http://{}", server.addr),
            _server: server,
        }
    }
}

/// The merchant's page: its own early script queues `identify` on the stub (before `init`, before
/// the async pixel can have loaded), then the snippet of docs/decisions.md §4 exactly as pasted,
/// then a buy button.
fn shop_page(convapi: &str, tracker_id: &str) -> String {
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Mug shop</title>
<script>
  window.svc = window.svc || function () {{ (svc.q = svc.q || []).push(arguments); }};
  svc('identify', '{TRACKER_CLIENT}');
  window.identifyQueued = !svc.v && Array.isArray(svc.q);
</script>
<script>
  window.svc = window.svc || function () {{ (svc.q = svc.q || []).push(arguments); }};
  svc('init', '{tracker_id}');
</script>
<script async src="{convapi}/pixel.js"></script>
</head><body>
<h1>Blue mug</h1><p>49.90 EUR</p>
<button id="buy" onclick="svc('track', 'purchase', {{orderId: '{ORDER_ID}', value: 49.9, currency: 'EUR'}}); window.bought = true">Buy</button>
</body></html>
"#
    )
}

fn serve_shop(mut conn: TcpStream, page: &str) {
    let Some((head, _)) = read_request(&mut conn) else {
        return;
    };
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = if path.starts_with("/shop/") {
        ("200 OK", page)
    } else if path == "/thanks" {
        (
            "200 OK",
            "<!doctype html><title>Thanks</title><p>Thank you!</p>",
        )
    } else {
        ("404 Not Found", "not found")
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

// ---------------------------------------------------------------------------------------------
// A recording proxy in front of convapi: it forwards each request unchanged (one per connection)
// and keeps what it saw, so the test knows whether a batch left by fetch or by sendBeacon.

#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    /// Names lower-cased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Proxy {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    _server: Server,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let upstream = upstream
            .strip_prefix("http://")
            .expect("an http:// base")
            .to_owned();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let server = Server::start(move |mut conn| {
            let Some((head, body)) = read_request(&mut conn) else {
                return;
            };
            let mut lines = head.split("\r\n");
            let request_line = lines.next().unwrap_or_default().to_owned();
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let mut up = TcpStream::connect(&upstream).expect("connect to convapi");
            let mut out = format!("{request_line}\r\n");
            for (k, v) in headers.iter().filter(|(k, _)| k != "connection") {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("connection: close\r\n\r\n");
            up.write_all(out.as_bytes()).unwrap();
            up.write_all(&body).unwrap();
            log.lock().unwrap().push(Seen {
                request_line,
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
            let _ = std::io::copy(&mut up, &mut conn);
        });
        Proxy {
            base: format!("http://{}", server.addr),
            seen,
            _server: server,
        }
    }

    /// The `POST /api/collect` requests so far, in arrival order.
    fn collects(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.request_line.starts_with("POST /api/collect "))
            .cloned()
            .collect()
    }
}

/// Reads one request: its head (up to the blank line) and its `Content-Length` body.
fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let _ = conn.set_read_timeout(Some(PATIENCE));
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None, // e.g. a spare connection Chromium never used
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
        if data.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&data[..end]).into_owned();
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "a chunked request was not expected: {head}"
    );
    let len = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| {
            v.trim().parse::<usize>().expect("Content-Length")
        });
    let mut body = data[end + 4..].to_vec();
    while body.len() < len {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    Some((head, body))
}

/// A thread-per-connection TCP server on 127.0.0.1, port 0; stops accepting on drop.
struct Server {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start(handle: impl Fn(TcpStream) + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = Arc::new(handle);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let handle = handle.clone();
                // One thread per connection: Chromium opens spare connections that send nothing.
                thread::spawn(move || handle(conn));
            }
        });
        Server { addr, stop }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }
}
