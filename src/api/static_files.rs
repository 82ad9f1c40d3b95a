//! Files compiled into the binary: the browser pixel and the OpenAPI description.

use crate::http::{Ctx, Reply, StaticFile};

static PIXEL_JS: StaticFile = StaticFile::new(
    include_str!("../../assets/pixel.js"),
    "application/javascript; charset=utf-8",
    3600,
);
static OPENAPI_YAML: StaticFile =
    StaticFile::new(include_str!("../../openapi.yaml"), "application/yaml", 300);

pub fn pixel(ctx: &Ctx) -> Reply {
    PIXEL_JS
        .reply(ctx)
        .header("Access-Control-Allow-Origin", "*")
}

pub fn openapi(ctx: &Ctx) -> Reply {
    OPENAPI_YAML.reply(ctx)
}
