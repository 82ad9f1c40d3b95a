//! `DELETE /api/sites/{siteId}/people/{clientId}`: erasure of one person by the merchant's user id
//! (docs/decisions.md §9). The same key checks as the conversions endpoint (401, 404, 403), then
//! one writer job that removes the person's visitors, links, sessions and pixel events and
//! anonymises (or, with `?deleteConversions=true`, deletes) their conversions. It answers what
//! it removed; a second call answers zeros.

use serde_json::json;

use super::{validate, ApiError, App};
use crate::http::{Ctx, Reply};
use crate::store::{self, erasure::Person};

/// `deleteConversions` from the query: absent is false; any other parameter is ignored.
fn delete_conversions(query: &str) -> Result<bool, ApiError> {
    let mut found = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "deleteConversions" {
            continue;
        }
        let v = match value {
            "true" => true,
            "false" => false,
            _ => {
                return Err(ApiError::validation(
                    "deleteConversions",
                    "deleteConversions must be true or false",
                ))
            }
        };
        if found.is_some_and(|f| f != v) {
            return Err(ApiError::validation(
                "deleteConversions",
                "deleteConversions is given twice with different values",
            ));
        }
        found = Some(v);
    }
    Ok(found.unwrap_or(false))
}

pub fn forget(app: &App, ctx: &mut Ctx, site_id: &str, client_id: &str) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let conn = app.pool.get()?;
    let site = store::read(&conn, |conn| {
        super::authorize(app, conn, &key_hash, site_id)
    })?;
    drop(conn);
    let delete = delete_conversions(&ctx.query)?;
    if client_id.is_empty() || client_id.chars().count() > validate::MAX_ID_CHARS {
        return Err(ApiError::validation(
            "clientId",
            format!(
                "clientId must have 1 to {} characters",
                validate::MAX_ID_CHARS
            ),
        ));
    }
    let (site_key, client) = (site.id.clone(), client_id.to_owned());
    let erased = app
        .writer
        .submit(move |c| {
            let erased = store::erasure::forget(c, &site_key, Person::Client(&client), delete)?;
            store::retention::reclaim(c)?;
            Ok(erased)
        })
        .inspect_err(|e| super::count_unavailable(app, e))?;
    let mut body = erased_json(&site.id, &erased);
    body["clientId"] = json!(client_id);
    Ok(Reply::json(200, &body))
}

/// What an erasure removed, as the API answers it and `convapi forget --json` prints it.
pub fn erased_json(site_id: &str, erased: &store::erasure::Erased) -> serde_json::Value {
    json!({
        "siteId": site_id,
        "visitors": erased.visitors,
        "links": erased.links,
        "sessions": erased.sessions,
        "events": erased.events,
        "conversionsAnonymised": erased.conversions_anonymised,
        "conversionsDeleted": erased.conversions_deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::delete_conversions;

    #[test]
    fn the_flag_is_read_from_the_query() {
        assert!(!delete_conversions("").unwrap());
        assert!(delete_conversions("deleteConversions=true").unwrap());
        assert!(!delete_conversions("x=1&deleteConversions=false").unwrap());
        assert!(delete_conversions("deleteConversions=yes").is_err());
        assert!(delete_conversions("deleteConversions=true&deleteConversions=false").is_err());
    }
}
