//! The pixel's endpoint, `POST /api/collect`, as a page's script would call it: a batch of events
//! for a visitor on the default site's tracker, and shorthands for one pageview or an identify.
//! Times are epoch ms chosen by the test (`ts`), so sessions can be placed in the past.

use serde_json::{json, Value};

use super::app::TestApp;
use super::client::Resp;

impl TestApp {
    /// `POST /api/collect` with a JSON body as `application/json`.
    pub fn collect(&self, body: &Value) -> Resp {
        self.send(
            "POST",
            "/api/collect",
            &[("Content-Type", "application/json")],
            Some(&serde_json::to_vec(body).expect("serialise")),
        )
    }

    /// Sends `events` for `visitor_id` to the default site's tracker; asserts 200 and returns
    /// the `sessionId` the batch ended in.
    #[track_caller]
    pub fn pixel(&self, visitor_id: &str, events: Value) -> String {
        let r = self.collect(&json!({
            "trackerId": self.site.tracker_id,
            "visitorId": visitor_id,
            "events": events,
        }));
        let v = r.expect(200);
        assert_eq!(v["visitorId"], json!(visitor_id), "{v}");
        r.str("sessionId")
    }

    /// One pageview at `ts_ms` (epoch ms); returns the session it joined or started.
    #[track_caller]
    pub fn pageview(&self, visitor_id: &str, url: &str, ts_ms: i64) -> String {
        self.pixel(
            visitor_id,
            json!([{"type": "pageview", "url": url, "ts": ts_ms}]),
        )
    }

    /// A pageview then `identify(client_id)` at `ts_ms`; returns the session.
    #[track_caller]
    pub fn identify(&self, visitor_id: &str, client_id: &str, ts_ms: i64) -> String {
        self.pixel(
            visitor_id,
            json!([
                {"type": "pageview", "url": "https://shop.example/", "ts": ts_ms},
                {"type": "identify", "userId": client_id, "ts": ts_ms},
            ]),
        )
    }
}
