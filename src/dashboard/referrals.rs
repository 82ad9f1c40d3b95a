//! The site's referral exclusion list on its Overview tab (docs/decisions.md §11): one host a
//! line, saved through `ops::referrals::replace`, which starts the re-attribution of the site's
//! conversions; the report page says what it did.

use maud::{html, Markup};

use super::{form, layout, overview, Dashboard, PageResult, Viewer};
use crate::http::Ctx;
use crate::ops;
use crate::store::{self, sites::Site};

/// The card: the list as stored, or as typed with the refusal.
pub fn card(v: &Viewer, site: &Site, hosts: &str, error: Option<&str>) -> Markup {
    html! {
        section.card #referrers-card {
            h2 { "Referral exclusion" }
            (layout::form_error(error))
            p.hint { "Referrers from these hosts (and their subdomains) never count as a source: a visitor back from a payment or sign-in page keeps the source they came from. A change re-attributes this site's conversions in the background; the report says when it is done." }
            form #referrers-form method="post" action={ "/dashboard/sites/" (site.id) "/referrers" } {
                (layout::csrf_field(v))
                label for="referrers" { "Hosts, one a line" }
                textarea #referrers name="referrers" rows="8" spellcheck="false" { (hosts) }
                button type="submit" { "Save list" }
            }
        }
    }
}

/// The site's list as the card shows it.
pub fn stored(d: &Dashboard, site: &Site) -> Result<String, super::PageError> {
    let hosts = d.read(|c| Ok(store::referrals::excluded(c, &site.id)?.unwrap_or_default()))?;
    Ok(hosts.join("\n"))
}

/// `POST /dashboard/sites/{id}/referrers`: saves the list, `303` back to the Overview with
/// "Saved."; a line that is not a host shows the card again with the line named.
pub fn update(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let form = form::post_form(ctx, v)?;
    let typed = form.get("referrers").cloned().unwrap_or_default();
    let parsed: Result<Vec<String>, crate::invalid::Invalid> = typed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(ops::referrals::host)
        .collect();
    let refusal = match parsed {
        Ok(hosts) => {
            let id = site.id.clone();
            match d
                .writer
                .submit(move |conn| ops::in_job(ops::referrals::replace(conn, &id, &hosts)))?
            {
                Ok(_) => {
                    return Ok(layout::redirect(&format!(
                        "/dashboard/sites/{}?saved=1",
                        site.id
                    )))
                }
                Err(e) => e.to_string(),
            }
        }
        Err(e) => format!("Referral exclusion: {e}."),
    };
    let card = card(v, site, &typed, Some(&refusal));
    let page = overview::page(d, ctx, v, site, card, None)?;
    Ok(layout::html(400, page))
}
