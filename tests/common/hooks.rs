//! Webhook sources through the front door: a Stripe source added by the CLI, and events posted to
//! it signed as Stripe signs them (`t=…,v1=…`, HMAC-SHA256 of "{t}.{body}").

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::app::TestApp;
use super::client::Resp;

/// The signing secret of the sources these helpers add.
pub const STRIPE_SECRET: &str = "whsec_test_5b1f0d0b7c3e4a6f9e2d";

/// Stripe's `Stripe-Signature` of `body` at `t` (Unix seconds) under `secret`.
pub fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={t},v1={hex}")
}

impl TestApp {
    /// A Stripe source of `site` with [`STRIPE_SECRET`]; `source add --json`'s answer.
    #[track_caller]
    pub fn add_stripe_source(&self, site: &str, origin: &str) -> Value {
        self.cli_json(&[
            "source",
            "add",
            "--site",
            site,
            "--kind",
            "stripe",
            "--secret",
            STRIPE_SECRET,
            "--public-url",
            origin,
            "--json",
        ])
    }

    /// `POST /hooks/{source}` of `body` with the Stripe signature `header`.
    pub fn post_hook(&self, source: &str, header: &str, body: &[u8]) -> Resp {
        self.send(
            "POST",
            &format!("/hooks/{source}"),
            &[
                ("Content-Type", "application/json"),
                ("Stripe-Signature", header),
            ],
            Some(body),
        )
    }

    /// `event` posted to `source`, signed now with [`STRIPE_SECRET`].
    pub fn post_stripe_event(&self, source: &str, event: &Value) -> Resp {
        let body = serde_json::to_vec(event).expect("JSON");
        let t = chrono::Utc::now().timestamp();
        self.post_hook(source, &stripe_signature(STRIPE_SECRET, t, &body), &body)
    }
}

/// The base64 HMAC-SHA256 of `body` under `secret`: how Shopify (`X-Shopify-Hmac-Sha256`) and
/// WooCommerce (`X-WC-Webhook-Signature`) sign a webhook's raw body.
pub fn base64_signature(secret: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(body);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

impl TestApp {
    /// A source of `kind` of the default site with `secret`; its id.
    #[track_caller]
    pub fn add_source(&self, kind: &str, secret: &str) -> String {
        let v = self.cli_json(&[
            "source",
            "add",
            "--site",
            &self.site.id,
            "--kind",
            kind,
            "--secret",
            secret,
            "--public-url",
            "https://stats.shop.example",
            "--json",
        ]);
        assert_eq!(v["kind"], serde_json::json!(kind), "{v}");
        v["id"].as_str().expect("an id").to_owned()
    }

    /// `POST /hooks/{source}` of the JSON `body` with `headers`.
    pub fn post_hook_with(&self, source: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut all = vec![("Content-Type", "application/json")];
        all.extend_from_slice(headers);
        self.send("POST", &format!("/hooks/{source}"), &all, Some(body))
    }
}

impl TestApp {
    /// The raw answer to a `POST /hooks/{source}` that declares a body of `length` bytes with
    /// `headers` and sends none of it: a refusal by the declared length comes without the client
    /// racing the server's close while it writes a mebibyte.
    pub fn post_hook_declaring(
        &self,
        source: &str,
        headers: &[(&str, &str)],
        length: usize,
    ) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.addr()).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut head = format!(
            "POST /hooks/{source} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\n"
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).expect("write the head");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        String::from_utf8_lossy(&raw).into_owned()
    }
}
