//! Site Settings → Sources over HTTP (docs/decisions/api.md, "Webhook sources"): a source added
//! through the form (CSRF checked, a refusal shown in the form), its address as `source add` prints
//! it, its latest events with their outcome, its signature failures with the sentence that says
//! what they mean, removal behind its confirmation page, and another tenant's user getting the
//! missing page for every URL of it. The browser's view is in `dashboard_browser.rs`.

use serde_json::json;

use crate::common::*;

const EMAIL_A: &str = "owner@a.example";
const EMAIL_B: &str = "owner@b.example";
const PASSWORD: &str = "correct horse battery staple";
const SECRET: &str = "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";

#[test]
fn a_source_added_on_its_page_shows_its_address_events_and_signature_failures() {
    let app = TestApp::start();
    create_user(&app, &app.tenant.id, EMAIL_A, PASSWORD);
    let tenant_b = app.create_tenant("Tenant B");
    create_user(&app, &tenant_b.id, EMAIL_B, PASSWORD);
    let a = DashClient::logged_in(&app, EMAIL_A, PASSWORD);
    let b = DashClient::logged_in(&app, EMAIL_B, PASSWORD);
    let base = format!("/dashboard/sites/{}/sources", app.site.id);

    // The link from the site's settings, and the empty page.
    let overview = a.page(&format!("/dashboard/sites/{}", app.site.id));
    assert!(overview.contains(&format!("href=\"{base}\"")), "{overview}");
    assert!(a.page(&base).contains("id=\"no-sources\""));

    // Without the session's CSRF token: refused, nothing added.
    let resp = a.post_form(
        &base,
        &[("csrf", "wrong"), ("kind", "shopify"), ("secret", SECRET)],
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    let listed = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(listed, json!([]));

    // A Stripe secret that is an API key: refused in the form's words, nothing added.
    let resp = a.submit(&base, &[("kind", "stripe"), ("secret", "sk_live_1")]);
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("id=\"form-error\""), "{}", resp.text());
    assert!(resp.text().contains("whsec_"), "{}", resp.text());

    // Added: back to the page, which shows the address `source add` would print.
    let resp = a.submit(&base, &[("kind", "shopify"), ("secret", SECRET)]);
    assert_eq!(resp.status, 303, "{}", resp.text());
    let listed = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed[0]["kind"], json!("shopify"));
    let page = a.page(&format!("{base}?added=1"));
    assert!(page.contains(&format!("/hooks/{id}</code>")), "{page}");
    assert!(page.contains("No signature failures."), "{page}");
    assert!(page.contains("No event received yet."), "{page}");
    assert!(!page.contains(SECRET), "the secret never reaches a page");

    // A post with the wrong secret: counted, and the page says what it most likely means.
    let body = br#"{"id":1,"total_price":"1.00"}"#;
    let wrong = base64_signature("not the secret", body);
    let resp = app.post_hook_with(
        &id,
        &[
            ("X-Shopify-Topic", "orders/paid"),
            ("X-Shopify-Hmac-Sha256", &wrong),
        ],
        body,
    );
    expect_error(&resp, 401, "BAD_SIGNATURE");
    // A signed event of a topic convapi does not take: listed with its outcome.
    let ok = base64_signature(SECRET, body);
    let resp = app.post_hook_with(
        &id,
        &[
            ("X-Shopify-Topic", "products/update"),
            ("X-Shopify-Hmac-Sha256", &ok),
            ("X-Shopify-Webhook-Id", "wh-1"),
        ],
        body,
    );
    assert_eq!(resp.expect(200)["outcome"], json!("ignored"));
    let page = a.page(&base);
    assert!(page.contains("1 signature failure, last at "), "{page}");
    assert!(
        page.contains(
            "the signing secret is probably wrong — copy it again from Shopify&#39;s webhook settings"
        ) || page.contains(
            "the signing secret is probably wrong — copy it again from Shopify's webhook settings"
        ),
        "{page}"
    );
    assert!(page.contains("<code>products/update</code>"), "{page}");
    assert!(page.contains("outcome-ignored"), "{page}");

    // Another tenant's user: the missing page for the list, the form and the removal.
    assert_eq!(b.get(&base).status, 404);
    let remove = format!("{base}/{id}/remove");
    assert_eq!(b.get(&remove).status, 404);
    assert_eq!(b.submit(&remove, &[]).status, 404);
    assert_eq!(
        b.submit(&base, &[("kind", "stripe"), ("secret", "whsec_x")])
            .status,
        404
    );
    let listed = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    // Removed through its confirmation page: its address answers 404.
    assert!(a.page(&remove).contains("id=\"remove-form\""));
    let resp = a.submit(&remove, &[]);
    assert_eq!(resp.status, 303, "{}", resp.text());
    let listed = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(listed, json!([]));
    let resp = app.post_hook_with(
        &id,
        &[
            ("X-Shopify-Topic", "orders/paid"),
            ("X-Shopify-Hmac-Sha256", &ok),
        ],
        body,
    );
    expect_error(&resp, 404, "SOURCE_NOT_FOUND");
}
