//! HTTP through the front door: one exchange at a time with a blocking client that treats every
//! status as an answer, the response type [`Resp`], and [`TestApp`]'s request shorthands for the
//! API's routes. Assertions on answers are in `assert.rs`, pixel batches in `pixel.rs`.

use serde_json::Value;

use super::app::{TestApp, WAIT};

/// An HTTP response, fully read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body text when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {:?}",
                self.status,
                self.text()
            )
        })
    }

    /// A string member of the JSON body; panics when absent.
    pub fn str(&self, name: &str) -> String {
        match self.json().get(name) {
            Some(Value::String(s)) => s.clone(),
            other => panic!(
                "status {}: {name} is {other:?} in {}",
                self.status,
                self.text()
            ),
        }
    }
}

impl TestApp {
    /// One request: `path` is appended to `base`. `body: None` sends no body at all.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        send(
            &self.agent,
            method,
            &format!("{}{path}", self.base),
            headers,
            body,
        )
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[], None)
    }

    /// A counter's or gauge's value in `/metrics` (`name` with its labels, if any, as written).
    pub fn metric(&self, name: &str) -> u64 {
        metric_in(&self.get("/metrics").text(), name) as u64
    }

    /// `POST /api/sites/{default site}/conversions` with the default key and a JSON body.
    pub fn post_conversion(&self, body: &Value) -> Resp {
        self.post_conversion_as(&self.key.key, &self.site.id, body)
    }

    /// `POST /api/sites/{site}/conversions` with `key` and a JSON body.
    pub fn post_conversion_as(&self, key: &str, site: &str, body: &Value) -> Resp {
        self.post_conversion_raw(
            &[
                ("Authorization", &format!("Bearer {key}")),
                ("Content-Type", "application/json"),
            ],
            site,
            &serde_json::to_vec(body).expect("serialise"),
        )
    }

    /// `POST /api/sites/{site}/conversions` with exactly these headers and bytes.
    pub fn post_conversion_raw(&self, headers: &[(&str, &str)], site: &str, body: &[u8]) -> Resp {
        self.send(
            "POST",
            &format!("/api/sites/{site}/conversions"),
            headers,
            Some(body),
        )
    }

    /// `POST …/conversions/{order}/adjustments` on the default site with the default key.
    pub fn post_adjustment(&self, order: &str, body: &Value) -> Resp {
        self.post_adjustment_raw(
            &self.key.key,
            &self.site.id,
            order,
            Some("application/json"),
            &serde_json::to_vec(body).unwrap(),
        )
    }

    pub fn post_adjustment_raw(
        &self,
        key: &str,
        site: &str,
        order: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Resp {
        let auth = format!("Bearer {key}");
        let mut headers = vec![("Authorization", auth.as_str())];
        if let Some(ct) = content_type {
            headers.push(("Content-Type", ct));
        }
        self.send(
            "POST",
            &format!(
                "/api/sites/{site}/conversions/{}/adjustments",
                encode_segment(order)
            ),
            &headers,
            Some(body),
        )
    }

    /// `GET /api/sites/{default site}/conversions/{orderId}` with the default key.
    pub fn order_status(&self, order_id: &str) -> Resp {
        self.order_status_as(&self.key.key, &self.site.id, order_id)
    }

    pub fn order_status_as(&self, key: &str, site: &str, order_id: &str) -> Resp {
        self.send(
            "GET",
            &format!("/api/sites/{site}/conversions/{}", encode_segment(order_id)),
            &[("Authorization", &format!("Bearer {key}"))],
            None,
        )
    }
}

/// One HTTP exchange with `agent`; transport errors panic (a test never expects them).
pub fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    try_send(agent, method, url, headers, body)
        .unwrap_or_else(|e| panic!("{method} {url}: transport error: {e}"))
}

/// One HTTP exchange; a transport failure (refused, reset) is an `Err`.
pub fn try_send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Resp, ureq::Error> {
    let mut b = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut resp = match body {
        Some(bytes) => agent.run(b.body(bytes.to_vec()).expect("request"))?,
        None => agent.run(b.body(()).expect("request"))?,
    };
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = if method == "HEAD" {
        Vec::new()
    } else {
        resp.body_mut()
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_vec()?
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// A new HTTP client configured like the harness's (non-2xx statuses are answers, not errors).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(WAIT))
        .max_redirects(0)
        .build()
        .into()
}

/// Percent-encodes one path segment (everything but unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A sample's value in a `/metrics` text; `name` is the whole series, with its labels as written.
pub fn metric_in(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == name).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}
