//! Files compiled into the binary: the browser pixel and the OpenAPI description.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::http::{Ctx, Reply};

pub const PIXEL_JS: &str = include_str!("../../assets/pixel.js");
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

fn etag(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

fn cached(ctx: &Ctx, body: &'static str, tag: &str, content_type: &str, max_age: u32) -> Reply {
    let fresh = ctx
        .header("If-None-Match")
        .is_some_and(|h| h.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let reply = if fresh {
        Reply {
            status: 304,
            headers: Vec::new(),
            body: Vec::new(),
        }
    } else {
        Reply::bytes(200, content_type, body.as_bytes().to_vec())
    };
    reply
        .header("ETag", tag)
        .header("Cache-Control", &format!("public, max-age={max_age}"))
}

pub fn pixel(ctx: &Ctx) -> Reply {
    static TAG: OnceLock<String> = OnceLock::new();
    let tag = TAG.get_or_init(|| etag(PIXEL_JS));
    cached(
        ctx,
        PIXEL_JS,
        tag,
        "application/javascript; charset=utf-8",
        3600,
    )
    .header("Access-Control-Allow-Origin", "*")
}

pub fn openapi(ctx: &Ctx) -> Reply {
    static TAG: OnceLock<String> = OnceLock::new();
    let tag = TAG.get_or_init(|| etag(OPENAPI_YAML));
    cached(ctx, OPENAPI_YAML, tag, "application/yaml", 300)
}
