//! A site's referral exclusion list (docs/decisions.md §11): the hosts whose referrals never count
//! as a source. Editing it starts the re-attribution of the site's conversions in the background
//! (`crate::reattribute`).

use super::sites::{find, SiteError};
use crate::attribution::is_within;
use crate::invalid::Invalid;
use crate::store::{self, engine::AsConn};

/// A host as the list keeps it: lower case, without scheme, path, port or a leading `www.` or
/// `*.`; refused unless it is a host name with a dot.
pub fn host(text: &str) -> Result<String, Invalid> {
    let t = text.trim().trim_start_matches("*.").trim_start_matches('.');
    let h = crate::sites::normalise_domain(t)
        .ok()
        .filter(|h| h.contains('.') && !h.starts_with('.') && !h.ends_with('.'))
        .ok_or_else(|| {
            Invalid(format!(
                "{text:?} is not a host: give a host name alone, like paypal.com (its subdomains \
                 count with it)"
            ))
        })?;
    Ok(h)
}

/// The list after an edit, and whether the edit changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    pub hosts: Vec<String>,
    pub changed: bool,
}

/// The site's list (the default one until edited).
pub fn list(conn: &impl AsConn, id: &str) -> Result<Vec<String>, SiteError> {
    let site = find(conn, id)?;
    Ok(store::referrals::excluded(conn, &site.id)?.unwrap_or_default())
}

/// Adds each of `exclude` not on the list yet, then removes every entry that is one of `include`
/// or a subdomain of one (hosts as [`host`] keeps them). A change stores the list and starts the
/// re-attribution of the site's conversions; none changes nothing.
pub fn edit(
    conn: &impl AsConn,
    id: &str,
    exclude: &[String],
    include: &[String],
) -> Result<Edited, SiteError> {
    let site = find(conn, id)?;
    let before = store::referrals::excluded(conn, &site.id)?.unwrap_or_default();
    let mut hosts = before.clone();
    for h in exclude {
        if !hosts.contains(h) {
            hosts.push(h.clone());
        }
    }
    hosts.retain(|entry| !include.iter().any(|i| is_within(entry, i)));
    let changed = hosts != before;
    if changed {
        store::referrals::set(conn, &site.id, &hosts)?;
    }
    Ok(Edited { hosts, changed })
}

/// Replaces the site's list with `hosts` (each as [`host`] keeps it, repeats dropped); a change
/// starts the re-attribution, as [`edit`].
pub fn replace(conn: &impl AsConn, id: &str, hosts: &[String]) -> Result<Edited, SiteError> {
    let site = find(conn, id)?;
    let before = store::referrals::excluded(conn, &site.id)?.unwrap_or_default();
    let mut after: Vec<String> = Vec::with_capacity(hosts.len());
    for h in hosts {
        if !after.contains(h) {
            after.push(h.clone());
        }
    }
    let changed = after != before;
    if changed {
        store::referrals::set(conn, &site.id, &after)?;
    }
    Ok(Edited {
        hosts: after,
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_kept_bare_or_refused_with_the_fix() {
        assert_eq!(host(" PayPal.com ").unwrap(), "paypal.com");
        assert_eq!(
            host("https://www.paypal.com/checkout").unwrap(),
            "paypal.com"
        );
        assert_eq!(host("*.klarna.com").unwrap(), "klarna.com");
        for bad in ["", "localhost", "pay pal.com", "paypal.com."] {
            let e = host(bad).unwrap_err();
            assert!(e.0.contains("like paypal.com"), "{bad}: {e:?}");
        }
    }
}
