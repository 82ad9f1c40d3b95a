//! Files compiled into the binary: the browser pixel and the OpenAPI description.

use std::sync::OnceLock;

use crate::http::{etag, Ctx, Reply};

pub const PIXEL_JS: &str = include_str!("../../assets/pixel.js");
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

pub fn pixel(ctx: &Ctx) -> Reply {
    static TAG: OnceLock<String> = OnceLock::new();
    let tag = TAG.get_or_init(|| etag(PIXEL_JS));
    Reply::cached(
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
    Reply::cached(ctx, OPENAPI_YAML, tag, "application/yaml", 300)
}
