//! Files compiled into the binary: the browser pixel, the OpenAPI description and the favicon.

use crate::http::{Ctx, Reply, StaticFile};

static PIXEL_JS: StaticFile = StaticFile::new(
    include_str!("../../assets/pixel.js"),
    "application/javascript; charset=utf-8",
    3600,
);
static OPENAPI_YAML: StaticFile =
    StaticFile::new(include_str!("../../openapi.yaml"), "application/yaml", 300);

/// The dashboard's icon, an SVG at the path browsers ask for by default (`/favicon.ico`); browsers
/// go by the `Content-Type`, not the name.
static FAVICON: StaticFile = StaticFile::new(
    include_str!("../../assets/favicon.svg"),
    "image/svg+xml",
    86_400,
);

pub fn favicon(ctx: &Ctx) -> Reply {
    FAVICON.reply(ctx)
}

pub fn pixel(ctx: &Ctx) -> Reply {
    PIXEL_JS
        .reply(ctx)
        .header("Access-Control-Allow-Origin", "*")
}

pub fn openapi(ctx: &Ctx) -> Reply {
    OPENAPI_YAML.reply(ctx)
}
