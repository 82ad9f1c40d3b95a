//! Attribution (docs/decisions.md §5, step 1): the channel of a session and the touch a model picks.
//!
//! Pure code over [`Session`] values: no SQL, no clock. The pipeline loads the person's sessions in
//! the window and calls [`attribute`]. Channel rules, first match wins:
//! 1. UTM: `utm_source` / `utm_medium` as tagged (a missing one of the two is `(not set)`);
//! 2. click ids: `gclid`, `gbraid`, `wbraid` → google/cpc, `fbclid` → facebook/paid,
//!    `msclkid` → bing/cpc, `ttclid` → tiktok/paid;
//! 3. the referrer's host: a known search engine → `<engine>/organic`, the site's own domain (and its
//!    subdomains) → ignored, any other host → `<host>/referral`;
//! 4. otherwise `(direct)/(none)`.
//!
//! The campaign is `utm_campaign` whenever the landing URL carried one, whatever decided the channel.

use std::str::FromStr;

use crate::invalid::Invalid;
use crate::store::sessions::Session;

pub const DIRECT_SOURCE: &str = "(direct)";
pub const DIRECT_MEDIUM: &str = "(none)";
pub const NOT_SET: &str = "(not set)";
/// The source, medium and campaign of an order kept with no session (docs/decisions.md §3), and
/// the report's key of a conversion not attributed yet.
pub const UNATTRIBUTED: &str = "(unattributed)";

/// How the touch is chosen among the person's sessions in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// The latest session whose channel is not direct; the latest session when all are direct.
    LastNonDirect,
    /// The latest session.
    LastTouch,
    /// The earliest session.
    FirstTouch,
}

impl Model {
    pub fn as_str(self) -> &'static str {
        match self {
            Model::LastNonDirect => "last_non_direct",
            Model::LastTouch => "last_touch",
            Model::FirstTouch => "first_touch",
        }
    }
}

impl FromStr for Model {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Model, Invalid> {
        match s {
            "last_non_direct" => Ok(Model::LastNonDirect),
            "last_touch" => Ok(Model::LastTouch),
            "first_touch" => Ok(Model::FirstTouch),
            other => Err(format!("unknown attribution model {other:?}").into()),
        }
    }
}

/// Where a session came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub source: String,
    pub medium: String,
    pub campaign: Option<String>,
}

impl Channel {
    pub fn is_direct(&self) -> bool {
        self.source == DIRECT_SOURCE && self.medium == DIRECT_MEDIUM
    }
}

/// The result stored with a conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    pub model: Model,
    /// The chosen session; `None` only when the person has no session at all.
    pub session_id: Option<String>,
    pub channel: Channel,
}

const CLICK_IDS: [(&str, &str); 4] = [
    ("google", "cpc"),
    ("facebook", "paid"),
    ("bing", "cpc"),
    ("tiktok", "paid"),
];

/// The channel of one session. `own_domain` is the site's domain (lower case, no `www.`).
pub fn channel(s: &Session, own_domain: Option<&str>) -> Channel {
    channel_with(s, own_domain, &[])
}

/// [`channel`] with a referral exclusion list: a referrer whose host is one of `excluded` (or a
/// subdomain of one) counts as no referrer, so the session is direct unless tagged or clicked.
pub fn channel_with(s: &Session, own_domain: Option<&str>, excluded: &[String]) -> Channel {
    let c = &s.campaign;
    let tagged = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    let campaign = tagged(&c.utm_campaign);
    let (utm_source, utm_medium) = (tagged(&c.utm_source), tagged(&c.utm_medium));
    if utm_source.is_some() || utm_medium.is_some() {
        return Channel {
            source: utm_source.unwrap_or_else(|| NOT_SET.into()),
            medium: utm_medium.unwrap_or_else(|| NOT_SET.into()),
            campaign,
        };
    }
    let present = |v: &Option<String>| v.as_deref().is_some_and(|t| !t.trim().is_empty());
    let click = if present(&c.gclid) || present(&c.gbraid) || present(&c.wbraid) {
        Some(CLICK_IDS[0])
    } else if present(&c.fbclid) {
        Some(CLICK_IDS[1])
    } else if present(&c.msclkid) {
        Some(CLICK_IDS[2])
    } else if present(&c.ttclid) {
        Some(CLICK_IDS[3])
    } else {
        None
    };
    if let Some((source, medium)) = click {
        return Channel {
            source: source.into(),
            medium: medium.into(),
            campaign,
        };
    }
    if let Some(host) = s.referrer.as_deref().and_then(referrer_host) {
        if !is_own(&host, own_domain) && !excluded.iter().any(|e| is_within(&host, e)) {
            return match search_engine(&host) {
                Some(engine) => Channel {
                    source: engine.into(),
                    medium: "organic".into(),
                    campaign,
                },
                None => Channel {
                    source: host.strip_prefix("www.").unwrap_or(&host).to_owned(),
                    medium: "referral".into(),
                    campaign,
                },
            };
        }
    }
    Channel {
        source: DIRECT_SOURCE.into(),
        medium: DIRECT_MEDIUM.into(),
        campaign,
    }
}

/// Picks the touch per `model` among `sessions` (any order). Ties on start time go to the
/// smaller session id, so the choice never depends on the order rows came back in.
pub fn attribute(model: Model, sessions: &[Session], own_domain: Option<&str>) -> Touch {
    attribute_with(model, sessions, own_domain, &[])
}

/// [`attribute`] with a referral exclusion list (see [`channel_with`]): under `last_non_direct`, a
/// return from a payment page leaves the touch to the session before it.
pub fn attribute_with(
    model: Model,
    sessions: &[Session],
    own_domain: Option<&str>,
    excluded: &[String],
) -> Touch {
    let mut ordered: Vec<&Session> = sessions.iter().collect();
    ordered.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    let with_channel = |s: &Session| (s.id.clone(), channel_with(s, own_domain, excluded));
    let chosen = match model {
        Model::FirstTouch => ordered.first().map(|s| with_channel(s)),
        Model::LastTouch => ordered.last().map(|s| with_channel(s)),
        Model::LastNonDirect => ordered
            .iter()
            .rev()
            .map(|s| with_channel(s))
            .find(|(_, ch)| !ch.is_direct())
            .or_else(|| ordered.last().map(|s| with_channel(s))),
    };
    match chosen {
        Some((id, channel)) => Touch {
            model,
            session_id: Some(id),
            channel,
        },
        None => Touch {
            model,
            session_id: None,
            channel: Channel {
                source: DIRECT_SOURCE.into(),
                medium: DIRECT_MEDIUM.into(),
                campaign: None,
            },
        },
    }
}

/// The host of a referrer URL, lower case, without port or credentials. Android apps send
/// `android-app://com.google.android.googlequicksearchbox/`: the package name stands for the host.
fn referrer_host(referrer: &str) -> Option<String> {
    let r = referrer.trim();
    let (scheme, rest) = r.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = if host_port.starts_with('[') {
        host_port.split(']').next().map(|h| format!("{h}]"))?
    } else {
        host_port.split(':').next().unwrap_or("").to_owned()
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    match scheme.to_ascii_lowercase().as_str() {
        "http" | "https" => Some(host),
        "android-app" => Some(host),
        _ => None,
    }
}

/// True when `host` is the site's own domain or one of its subdomains (`www.` included).
fn is_own(host: &str, own_domain: Option<&str>) -> bool {
    let Some(own) = own_domain
        .map(|d| d.trim().trim_start_matches("www.").to_ascii_lowercase())
        .filter(|d| !d.is_empty())
    else {
        return false;
    };
    host == own
        || host
            .strip_suffix(own.as_str())
            .is_some_and(|prefix| prefix.ends_with('.'))
}

/// Search engines whose name is the second-level label under a country or generic suffix
/// (`google.com`, `www.google.co.uk`, `yandex.ru`), by the label and the subdomains that are search.
const ENGINES_BY_LABEL: &[(&str, &str, &[&str])] = &[
    ("google", "google", &["", "www."]),
    ("bing", "bing", &["", "www.", "cn."]),
    ("yandex", "yandex", &["", "www."]),
    ("yahoo", "yahoo", &["search.", "*search."]),
    ("naver", "naver", &["search."]),
    ("seznam", "seznam", &["search.", ""]),
    ("ask", "ask", &["", "www."]),
];

/// Search engines known by exact host (or a subdomain of it).
const ENGINES_BY_HOST: &[(&str, &str)] = &[
    ("duckduckgo.com", "duckduckgo"),
    ("ecosia.org", "ecosia"),
    ("qwant.com", "qwant"),
    ("startpage.com", "startpage"),
    ("search.brave.com", "brave"),
    ("baidu.com", "baidu"),
    ("ya.ru", "yandex"),
    ("so.com", "360"),
    ("sogou.com", "sogou"),
    ("search.aol.com", "aol"),
    ("com.google.android.googlequicksearchbox", "google"),
    ("com.google.android.gm", "gmail"),
];

fn search_engine(host: &str) -> Option<&'static str> {
    for (suffix, engine) in ENGINES_BY_HOST {
        if host == *suffix || host.strip_suffix(suffix).is_some_and(|p| p.ends_with('.')) {
            // A mail app is not a search engine; callers see it as a referral.
            return (*engine != "gmail").then_some(*engine);
        }
    }
    let labels: Vec<&str> = host.split('.').collect();
    for (engine, label, prefixes) in ENGINES_BY_LABEL {
        // The engine's label followed by a public suffix of one or two short labels:
        // google.de, google.co.uk, google.com.br; not google.example.org.
        let Some(pos) = labels.iter().rposition(|l| l == label) else {
            continue;
        };
        let suffix = &labels[pos + 1..];
        let suffix_ok = match suffix {
            [tld] => tld.len() >= 2 && (tld.len() <= 3 || *tld == "info"),
            [sld, cc] => cc.len() == 2 && matches!(*sld, "co" | "com" | "ne" | "or"),
            _ => false,
        };
        if !suffix_ok {
            continue;
        }
        let prefix = if pos == 0 {
            String::new()
        } else {
            format!("{}.", labels[..pos].join("."))
        };
        let prefix_ok = prefixes.iter().any(|p| match p.strip_prefix('*') {
            Some(tail) => prefix.ends_with(tail),
            None => prefix == *p,
        });
        if prefix_ok {
            return Some(engine);
        }
    }
    None
}

/// The channels of the report's `channel` grouping, in the order the report lists them.
pub const CHANNELS: [&str; 8] = [
    "Paid Search",
    "Paid Social",
    "Organic Search",
    "Organic Social",
    "Email",
    "Referral",
    "Direct",
    "Unattributed",
];

/// Mediums that mean a paid click on a search network (or paid without saying where: a social
/// source makes it Paid Social).
const PAID_MEDIUMS: &[&str] = &[
    "cpc",
    "ppc",
    "paid",
    "paidsearch",
    "paid_search",
    "paid-search",
    "sem",
    "cpm",
    "cpv",
    "cpa",
    "display",
    "banner",
];
const PAID_SOCIAL_MEDIUMS: &[&str] = &[
    "paidsocial",
    "paid_social",
    "paid-social",
    "social_paid",
    "social-paid",
    "socialpaid",
];
const SOCIAL_MEDIUMS: &[&str] = &[
    "social",
    "social-network",
    "social_network",
    "social-media",
    "social_media",
    "sm",
    "organic_social",
    "organic-social",
];
const EMAIL_MEDIUMS: &[&str] = &["email", "e-mail", "e_mail", "mail", "newsletter"];
/// Social networks as `utm_source` names them.
const SOCIAL_NAMES: &[&str] = &[
    "facebook",
    "fb",
    "instagram",
    "ig",
    "meta",
    "twitter",
    "x",
    "linkedin",
    "pinterest",
    "reddit",
    "tiktok",
    "youtube",
    "snapchat",
    "threads",
    "bluesky",
    "mastodon",
    "tumblr",
    "vk",
    "whatsapp",
    "telegram",
];
/// Social networks' hosts (and their subdomains), as a referral's source names them.
const SOCIAL_HOSTS: &[&str] = &[
    "facebook.com",
    "fb.com",
    "fb.me",
    "instagram.com",
    "twitter.com",
    "t.co",
    "x.com",
    "linkedin.com",
    "lnkd.in",
    "pinterest.com",
    "reddit.com",
    "tiktok.com",
    "youtube.com",
    "youtu.be",
    "snapchat.com",
    "threads.net",
    "bsky.app",
    "tumblr.com",
    "vk.com",
    "whatsapp.com",
    "t.me",
    "telegram.org",
];

/// The report's channel of an attributed source and medium (docs/decisions.md §11), first match
/// wins: `(unattributed)` → Unattributed; a paid medium (click ids give google/cpc, bing/cpc,
/// facebook/paid, tiktok/paid) → Paid Social from a social source or with a paid-social medium,
/// else Paid Search; a search engine's source or the `organic` medium → Organic Search; a social
/// source or medium → Organic Social; an email medium → Email; `(direct)`/`(none)` → Direct;
/// anything else → Referral. Case and surrounding spaces do not matter.
pub fn channel_group(source: &str, medium: &str) -> &'static str {
    let source = source.trim().to_ascii_lowercase();
    let medium = medium.trim().to_ascii_lowercase();
    let m = |list: &[&str]| list.contains(&medium.as_str());
    let social = SOCIAL_NAMES.contains(&source.as_str())
        || SOCIAL_HOSTS.iter().any(|h| is_within(&source, h));
    let search = search_engine(&source).is_some()
        || ENGINES_BY_LABEL.iter().any(|(name, _, _)| *name == source)
        || ENGINES_BY_HOST
            .iter()
            .any(|(_, name)| *name == source && *name != "gmail");
    if source == "(unattributed)" {
        "Unattributed"
    } else if m(PAID_SOCIAL_MEDIUMS) || (m(PAID_MEDIUMS) && social) {
        "Paid Social"
    } else if m(PAID_MEDIUMS) {
        "Paid Search"
    } else if search || medium == "organic" {
        "Organic Search"
    } else if social || m(SOCIAL_MEDIUMS) {
        "Organic Social"
    } else if m(EMAIL_MEDIUMS) {
        "Email"
    } else if source == DIRECT_SOURCE && medium == DIRECT_MEDIUM {
        "Direct"
    } else {
        "Referral"
    }
}

/// Whether `host` is `domain` or one of its subdomains.
pub fn is_within(host: &str, domain: &str) -> bool {
    host == domain
        || host
            .strip_suffix(domain)
            .is_some_and(|prefix| prefix.ends_with('.'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_excluded_referrer_counts_as_none() {
        let excluded = vec!["paypal.com".to_owned(), "checkout.stripe.com".to_owned()];
        for r in [
            "https://www.paypal.com/checkoutnow?token=x",
            "https://paypal.com/",
            "https://checkout.stripe.com/c/pay/cs_1",
        ] {
            let s = with_referrer(r);
            assert_eq!(channel(&s, None).medium, "referral", "{r}");
            assert_eq!(
                channel_with(&s, None, &excluded),
                ch("(direct)", "(none)", None),
                "{r}"
            );
        }
        // Neither a look-alike nor the parent of an excluded host.
        for r in ["https://notpaypal.com/", "https://stripe.com/"] {
            let s = with_referrer(r);
            assert_eq!(channel_with(&s, None, &excluded).medium, "referral", "{r}");
        }
        // The ad click before the PayPal return keeps the credit.
        let mut ad = session("a", 0);
        ad.campaign.gclid = Some("g".into());
        let mut back = session("b", 10);
        back.referrer = Some("https://www.paypal.com/".into());
        let sessions = [ad, back];
        let touch = attribute_with(Model::LastNonDirect, &sessions, None, &excluded);
        assert_eq!(
            (touch.session_id.as_deref(), touch.channel.source.as_str()),
            (Some("a"), "google")
        );
        let touch = attribute(Model::LastNonDirect, &sessions, None);
        assert_eq!(touch.channel.source, "paypal.com");
    }

    #[test]
    fn channel_groups_follow_the_rules_in_order() {
        let cases = [
            ("google", "cpc", "Paid Search"),
            ("bing", "cpc", "Paid Search"),
            ("facebook", "paid", "Paid Social"),
            ("tiktok", "paid", "Paid Social"),
            ("newsletter", "paid_social", "Paid Social"),
            ("partner", "CPM", "Paid Search"),
            ("google", "organic", "Organic Search"),
            ("duckduckgo", "organic", "Organic Search"),
            ("google", "(not set)", "Organic Search"),
            ("m.facebook.com", "referral", "Organic Social"),
            ("t.co", "referral", "Organic Social"),
            ("Instagram", "story", "Organic Social"),
            ("partner", "social", "Organic Social"),
            ("newsletter", "email", "Email"),
            ("news.example", "referral", "Referral"),
            ("partner", "(not set)", "Referral"),
            ("(direct)", "(none)", "Direct"),
            ("(unattributed)", "(unattributed)", "Unattributed"),
            ("facebook.company.example", "referral", "Referral"),
        ];
        for (source, medium, expected) in cases {
            assert_eq!(channel_group(source, medium), expected, "{source}/{medium}");
            assert!(CHANNELS.contains(&expected));
        }
    }

    use super::*;
    use crate::store::sessions::Campaign;

    fn session(id: &str, started_at: i64) -> Session {
        Session {
            id: id.into(),
            visitor_id: "v".into(),
            client_id: None,
            started_at,
            last_activity_at: started_at,
            landing_url: None,
            referrer: None,
            campaign: Campaign::default(),
        }
    }

    fn with_referrer(r: &str) -> Session {
        let mut s = session("s", 0);
        s.referrer = Some(r.into());
        s
    }

    fn ch(source: &str, medium: &str, campaign: Option<&str>) -> Channel {
        Channel {
            source: source.into(),
            medium: medium.into(),
            campaign: campaign.map(str::to_owned),
        }
    }

    #[test]
    fn utm_comes_first() {
        let mut s = with_referrer("https://www.google.com/");
        s.campaign.utm_source = Some("newsletter".into());
        s.campaign.utm_medium = Some("email".into());
        s.campaign.utm_campaign = Some("black-friday".into());
        s.campaign.gclid = Some("abc".into());
        assert_eq!(
            channel(&s, None),
            ch("newsletter", "email", Some("black-friday"))
        );
        let mut s = session("s", 0);
        s.campaign.utm_source = Some("partner".into());
        assert_eq!(channel(&s, None), ch("partner", NOT_SET, None));
    }

    #[test]
    fn click_ids_map_to_their_network() {
        type Slot = fn(&mut Campaign) -> &mut Option<String>;
        let cases: [(Slot, &str, &str); 6] = [
            (|c| &mut c.gclid, "google", "cpc"),
            (|c| &mut c.gbraid, "google", "cpc"),
            (|c| &mut c.wbraid, "google", "cpc"),
            (|c| &mut c.fbclid, "facebook", "paid"),
            (|c| &mut c.msclkid, "bing", "cpc"),
            (|c| &mut c.ttclid, "tiktok", "paid"),
        ];
        for (slot, source, medium) in cases {
            // A referrer does not override a click id.
            let mut s = with_referrer("https://news.example/");
            *slot(&mut s.campaign) = Some("x1".into());
            assert_eq!(channel(&s, None), ch(source, medium, None), "{source}");
        }
        // utm_campaign still names the campaign of a click.
        let mut s = session("s", 0);
        s.campaign.fbclid = Some("f".into());
        s.campaign.utm_campaign = Some("spring".into());
        assert_eq!(channel(&s, None), ch("facebook", "paid", Some("spring")));
    }

    #[test]
    fn search_engines_are_organic() {
        let cases = [
            ("https://www.google.com/", "google"),
            ("https://www.google.co.uk/search?q=x", "google"),
            ("https://google.de/", "google"),
            ("https://www.google.com.br/", "google"),
            ("https://www.bing.com/search?q=x", "bing"),
            ("https://duckduckgo.com/", "duckduckgo"),
            ("https://html.duckduckgo.com/", "duckduckgo"),
            ("https://uk.search.yahoo.com/", "yahoo"),
            ("https://yandex.ru/search/", "yandex"),
            ("https://www.ecosia.org/", "ecosia"),
            ("https://search.brave.com/", "brave"),
            ("https://www.baidu.com/s?wd=x", "baidu"),
            (
                "android-app://com.google.android.googlequicksearchbox/",
                "google",
            ),
            ("HTTPS://WWW.GOOGLE.FR:443/", "google"),
        ];
        for (referrer, engine) in cases {
            assert_eq!(
                channel(&with_referrer(referrer), None),
                ch(engine, "organic", None),
                "{referrer}"
            );
        }
    }

    #[test]
    fn other_hosts_are_referrals() {
        let cases = [
            ("https://news.example/a?b=c", "news.example"),
            ("https://www.blog.example/", "blog.example"),
            ("https://mail.google.com/", "mail.google.com"),
            ("https://google.example.org/", "google.example.org"),
            ("https://user:pw@forum.example:8443/t/1", "forum.example"),
            (
                "android-app://com.google.android.gm/",
                "com.google.android.gm",
            ),
        ];
        for (referrer, host) in cases {
            assert_eq!(
                channel(&with_referrer(referrer), None),
                ch(host, "referral", None),
                "{referrer}"
            );
        }
    }

    #[test]
    fn own_domain_and_its_subdomains_are_ignored() {
        for r in [
            "https://shop.example/cart",
            "https://www.shop.example/",
            "https://checkout.shop.example/pay",
            "http://SHOP.EXAMPLE:8080/",
        ] {
            assert_eq!(
                channel(&with_referrer(r), Some("shop.example")),
                ch(DIRECT_SOURCE, DIRECT_MEDIUM, None),
                "{r}"
            );
        }
        // A domain that merely ends with the same letters is someone else.
        assert_eq!(
            channel(
                &with_referrer("https://myshop.example/"),
                Some("shop.example")
            ),
            ch("myshop.example", "referral", None)
        );
        // Without a configured domain the site's pages would count as referrals.
        assert_eq!(
            channel(&with_referrer("https://shop.example/"), None),
            ch("shop.example", "referral", None)
        );
    }

    #[test]
    fn nothing_known_is_direct() {
        for r in [
            "",
            "not a url",
            "about:blank",
            "file:///tmp/x.html",
            "https:///",
        ] {
            assert!(channel(&with_referrer(r), None).is_direct(), "{r:?}");
        }
        assert!(channel(&session("s", 0), None).is_direct());
    }

    fn paid(id: &str, at: i64) -> Session {
        let mut s = session(id, at);
        s.campaign.gclid = Some("g".into());
        s
    }
    fn referral(id: &str, at: i64) -> Session {
        let mut s = session(id, at);
        s.referrer = Some("https://blog.example/".into());
        s
    }

    #[test]
    fn last_non_direct_skips_later_direct_sessions() {
        let sessions = [
            session("a-direct", 300),
            paid("b-paid", 200),
            referral("c-ref", 100),
        ];
        let t = attribute(Model::LastNonDirect, &sessions, None);
        assert_eq!(t.session_id.as_deref(), Some("b-paid"));
        assert_eq!(t.channel, ch("google", "cpc", None));
    }

    #[test]
    fn last_non_direct_falls_back_to_the_latest_direct() {
        let sessions = [session("x", 100), session("y", 200)];
        let t = attribute(Model::LastNonDirect, &sessions, None);
        assert_eq!(t.session_id.as_deref(), Some("y"));
        assert!(t.channel.is_direct());
    }

    #[test]
    fn last_and_first_touch_ignore_the_channel() {
        let sessions = [paid("b", 200), session("c", 300), referral("a", 100)];
        let last = attribute(Model::LastTouch, &sessions, None);
        assert_eq!(last.session_id.as_deref(), Some("c"));
        assert!(last.channel.is_direct());
        let first = attribute(Model::FirstTouch, &sessions, None);
        assert_eq!(first.session_id.as_deref(), Some("a"));
        assert_eq!(first.channel, ch("blog.example", "referral", None));
    }

    #[test]
    fn ties_break_on_the_session_id() {
        let sessions = [paid("b", 100), referral("a", 100)];
        assert_eq!(
            attribute(Model::FirstTouch, &sessions, None)
                .session_id
                .as_deref(),
            Some("a")
        );
        assert_eq!(
            attribute(Model::LastTouch, &sessions, None)
                .session_id
                .as_deref(),
            Some("b")
        );
    }

    #[test]
    fn no_session_is_direct_without_a_session() {
        let t = attribute(Model::FirstTouch, &[], None);
        assert_eq!(t.session_id, None);
        assert!(t.channel.is_direct());
    }

    #[test]
    fn models_parse_from_their_stored_names() {
        for m in [Model::LastNonDirect, Model::LastTouch, Model::FirstTouch] {
            assert_eq!(m.as_str().parse::<Model>(), Ok(m));
        }
        assert!("linear".parse::<Model>().is_err());
    }
}
