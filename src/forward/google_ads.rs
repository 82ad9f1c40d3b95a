//! Google Ads: offline click conversions through the REST interface of the Google Ads API
//! (`ConversionUploadService.UploadClickConversions`), authorised by an OAuth 2.0 refresh token
//! exchanged for an access token (docs/decisions.md §13, "Google Ads").
//!
//! One request carries up to 2,000 conversions with `partialFailure` on: Google takes the good
//! ones and names each bad one by its index in `partialFailureError`, so one bad conversion never
//! sinks the others. A repeat is recognised by its order id (`ORDER_ID_ALREADY_IN_USE`) or by its
//! click and time (`CLICK_CONVERSION_ALREADY_EXISTS`) and counts as delivered; a click less than
//! six hours old (`TOO_RECENT_EVENT`) is tried again after the six hours Google asks for.
//!
//! Secrets (the developer token, the OAuth client secret, the refresh token, the access token)
//! travel only in headers and in the token request's body: no URL, error or log line holds one,
//! and every text taken from an answer is scrubbed of them before it leaves this module.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Map, Value};

use crate::store::deliveries::{Facts, Status};
use crate::store::destinations::Destination;

use super::hash::{sha256_hex, user_hash};
use super::kinds::{self, action_resource, Kind, GOOGLE_ADS};
use super::platform::{
    age, click_session, consent, decimal, dedup_key, AdjustVerdict, Answer, Event, Http, Outage,
    Platform, Verdict,
};

/// The Google Ads platform.
pub struct GoogleAds;

/// The request error of a call to an API version Google no longer serves ("Version vNN is
/// deprecated. Requests to this version will be blocked.").
pub const VERSION_GONE_CODE: &str = "UNSUPPORTED_VERSION";
/// The API's base URL when the destination names no endpoint.
pub const DEFAULT_BASE: &str = "https://googleads.googleapis.com";
/// Google's OAuth 2.0 token endpoint; with an endpoint override, `{endpoint}/token`.
pub const DEFAULT_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// Most conversions in one upload request (`TOO_MANY_CONVERSIONS_IN_REQUEST` above it).
pub const MAX_CONVERSIONS: usize = 2_000;
/// The wait Google names for `TOO_RECENT_EVENT` ("retry after 6 hours have passed") and
/// `TOO_RECENT_CONVERSION_ACTION` ("try importing again in 6 hours").
pub const TOO_RECENT_WAIT_MS: i64 = 6 * 3_600_000;
/// An access token is used until this long before Google says it expires.
pub const TOKEN_MARGIN_MS: i64 = 60_000;
/// Longest text of Google's kept in an error.
const MAX_MESSAGE_CHARS: usize = 500;

const DAY_MS: i64 = 86_400_000;

/// The conversion errors that mean Google already has the conversion: delivered.
const ALREADY_THERE: &[&str] = &["CLICK_CONVERSION_ALREADY_EXISTS", "ORDER_ID_ALREADY_IN_USE"];
/// The conversion errors that clear by themselves after [`TOO_RECENT_WAIT_MS`].
const TOO_RECENT: &[&str] = &[
    "TOO_RECENT_EVENT",
    "TOO_RECENT_CONVERSION_ACTION",
    "TOO_RECENT_CALL",
];
/// The conversion errors that are the destination's, not the conversion's: no conversion of the
/// destination can go until someone fixes its settings or its Google Ads account.
const DESTINATION_ERRORS: &[&str] = &[
    "NO_CONVERSION_ACTION_FOUND",
    "INVALID_CONVERSION_ACTION_TYPE",
    "CUSTOMER_NOT_ACCEPTED_CUSTOMER_DATA_TERMS",
    "INVALID_CUSTOMER_ID",
    "CUSTOMER_NOT_FOUND",
];

impl Platform for GoogleAds {
    fn kind(&self) -> &'static Kind {
        &GOOGLE_ADS
    }

    fn check(
        &self,
        _dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Option<(&'static str, String)> {
        if click_id(event.facts).is_none() {
            let why = if event.facts.session.is_none() {
                "no Google click id (gclid, gbraid or wbraid): the order has no session \
                 (unattributed), so no click is known to send it with"
            } else {
                "no Google click id (gclid, gbraid or wbraid) in the session that brought the conversion"
            };
            return Some((Status::Skipped.as_str(), why.into()));
        }
        let click_at = click_session(event.facts).map_or(event.facts.occurred_at, |s| s.started_at);
        let old = now_ms - click_at;
        if old > GOOGLE_ADS.max_age_ms {
            return Some((
                Status::TooOld.as_str(),
                format!(
                    "the Google Ads click is {} old; Google takes a click conversion up to {} days after its click",
                    age(old),
                    GOOGLE_ADS.max_age_ms / DAY_MS
                ),
            ));
        }
        None
    }

    fn send(
        &self,
        http: &Http,
        dest: &Destination,
        events: &[Event<'_>],
        now_ms: i64,
    ) -> Result<Vec<Verdict>, Outage> {
        let cfg = Config::of(dest)?;
        let mut verdicts = Vec::with_capacity(events.len());
        for chunk in events.chunks(MAX_CONVERSIONS) {
            verdicts.extend(send_chunk(http, dest, &cfg, chunk, now_ms)?);
        }
        Ok(verdicts)
    }

    fn test(
        &self,
        http: &Http,
        dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Result<String, Outage> {
        let cfg = Config::of(dest)?;
        let conversion = conversion(&cfg, event).map_err(|u| Outage::Rejected(u.0))?;
        let click = ["gclid", "gbraid", "wbraid"]
            .iter()
            .find_map(|k| conversion.get(*k).map(|_| *k))
            .unwrap_or("no click id");
        let action = conversion["conversionAction"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let answer = upload(http, dest, &cfg, &[conversion], true, now_ms)?;
        let errors = partial_failure(&cfg, &answer.body)?;
        if errors.is_empty() {
            return Ok(format!(
                "Google Ads validated the test conversion (validateOnly: nothing was recorded): \
                 {action}, by {click}"
            ));
        }
        let listed: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect();
        Ok(format!(
            "Google Ads refused the test conversion (validateOnly: nothing was recorded): {}",
            listed.join("; ")
        ))
    }
}

/// A destination's settings and credentials, as the requests need them.
struct Config<'a> {
    /// Digits only.
    customer_id: String,
    /// `customers/{id}/conversionActions/{id}`.
    conversion_action: String,
    login_customer_id: Option<String>,
    developer_token: &'a str,
    client_id: &'a str,
    client_secret: &'a str,
    refresh_token: &'a str,
    /// Without a trailing `/`.
    base: String,
    token_url: String,
    /// The API version of the upload path (`versions.rs`).
    version: String,
}

fn text<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// A customer id as the API takes it: the digits of `123-456-7890`.
fn customer_digits(raw: &str, key: &str) -> Result<String, Outage> {
    kinds::customer_digits(raw).ok_or_else(|| {
        Outage::Unauthorized(format!(
            "Google Ads: '{key}' must be a customer id such as 123-456-7890"
        ))
    })
}

impl<'a> Config<'a> {
    fn of(dest: &'a Destination) -> Result<Config<'a>, Outage> {
        let setting = |key: &str| text(&dest.settings, key);
        let secret = |key: &'static str| {
            text(&dest.secrets, key).ok_or_else(|| {
                Outage::Unauthorized(format!("Google Ads: the destination has no '{key}'"))
            })
        };
        let customer_id = customer_digits(
            setting("customer_id").ok_or_else(|| {
                Outage::Unauthorized("Google Ads: the destination has no 'customer_id'".into())
            })?,
            "customer_id",
        )?;
        let action = setting("conversion_action").ok_or_else(|| {
            Outage::Unauthorized("Google Ads: the destination has no 'conversion_action'".into())
        })?;
        let conversion_action = action_resource(&customer_id, action).ok_or_else(|| {
            Outage::Unauthorized(
                "Google Ads: 'conversion_action' must be the conversion action's id (digits)"
                    .into(),
            )
        })?;
        let login_customer_id = setting("login_customer_id")
            .map(|l| customer_digits(l, "login_customer_id"))
            .transpose()?;
        let client_id = setting("client_id").ok_or_else(|| {
            Outage::Unauthorized("Google Ads: the destination has no 'client_id'".into())
        })?;
        let endpoint = dest
            .endpoint
            .as_deref()
            .map(|e| e.trim_end_matches('/').to_string());
        Ok(Config {
            customer_id,
            conversion_action,
            login_customer_id,
            developer_token: secret("developer_token")?,
            client_id,
            client_secret: secret("client_secret")?,
            refresh_token: secret("refresh_token")?,
            token_url: endpoint
                .as_ref()
                .map_or_else(|| DEFAULT_TOKEN_URL.to_string(), |e| format!("{e}/token")),
            base: endpoint.unwrap_or_else(|| DEFAULT_BASE.to_string()),
            version: super::versions::in_use(dest)
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn upload_url(&self) -> String {
        format!(
            "{}/{}/customers/{}:uploadClickConversions",
            self.base, self.version, self.customer_id
        )
    }

    fn adjustments_url(&self) -> String {
        format!(
            "{}/{}/customers/{}:uploadConversionAdjustments",
            self.base, self.version, self.customer_id
        )
    }

    /// The access token cache's key: the destination and a digest of its credentials, so that
    /// changed credentials never use a token of the old ones.
    fn cache_key(&self, dest: &Destination) -> String {
        let creds = sha256_hex(&format!(
            "{}\n{}\n{}\n{}",
            self.token_url, self.client_id, self.client_secret, self.refresh_token
        ));
        format!("{}\n{creds}", dest.id)
    }

    /// Takes every secret (and `extra`, the access token) out of a text from an answer.
    fn scrub(&self, s: &str, extra: Option<&str>) -> String {
        // As sent, and as the token request's form encoded it (`1//x` is `1%2F%2Fx` there).
        let out = super::platform::hide_secrets(
            s,
            [
                Some(self.developer_token),
                Some(self.client_secret),
                Some(self.refresh_token),
                extra,
            ]
            .into_iter()
            .flatten(),
            |_| "[redacted]".into(),
        );
        // Cut after the secrets are out, so that no half of one is left at the cut.
        out.chars().take(MAX_MESSAGE_CHARS).collect()
    }
}

/// The click id a conversion goes with, by Google's preference: `gclid`, else `gbraid`, else
/// `wbraid` (exactly one is sent: `GBRAID_WBRAID_BOTH_SET` refuses two).
fn click_id(f: &Facts) -> Option<(&'static str, &str)> {
    let s = click_session(f)?;
    [
        ("gclid", &s.gclid),
        ("gbraid", &s.gbraid),
        ("wbraid", &s.wbraid),
    ]
    .into_iter()
    .find_map(|(k, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (k, v)))
}

/// `yyyy-mm-dd hh:mm:ss+00:00`: the time in UTC with its offset, as `conversionDateTime` wants.
pub fn conversion_date_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S+00:00")
        .to_string()
}

/// Why a conversion cannot go to Google Ads (it is failed without a request).
#[derive(Debug)]
struct Unsendable(String);

/// One `ClickConversion` of the REST interface (camelCase), or why the conversion cannot go.
fn conversion(cfg: &Config<'_>, event: &Event<'_>) -> Result<Value, Unsendable> {
    let f = event.facts;
    let Some((click_key, click)) = click_id(f) else {
        return Err(Unsendable(
            "no Google click id (gclid, gbraid or wbraid) in the session that brought the conversion"
                .into(),
        ));
    };
    // The destination's event name of the conversion's type names a conversion action when it is
    // one (its id or resource name); otherwise the destination's own conversion action.
    let action = action_resource(&cfg.customer_id, event.name)
        .unwrap_or_else(|| cfg.conversion_action.clone());
    let mut c = Map::new();
    c.insert(click_key.into(), Value::String(click.to_string()));
    c.insert("conversionAction".into(), Value::String(action));
    c.insert(
        "conversionDateTime".into(),
        Value::String(conversion_date_time(f.occurred_at)),
    );
    if let Some(v) = f.value.as_deref().filter(|v| !v.is_empty()) {
        let n = decimal(v)
            .ok_or_else(|| Unsendable(format!("the conversion's value '{v}' is not a number")))?;
        c.insert("conversionValue".into(), Value::Number(n));
        c.insert("currencyCode".into(), Value::String(f.currency.clone()));
    }
    c.insert("orderId".into(), Value::String(dedup_key(f).to_string()));
    let consent = consent(f);
    let status = |granted: bool| if granted { "GRANTED" } else { "DENIED" };
    c.insert(
        "consent".into(),
        json!({
            "adUserData": status(consent.ad_user_data),
            "adPersonalization": status(consent.ad_personalization),
        }),
    );
    if consent.ad_user_data {
        let hashes = f.user_hashes.as_deref();
        let ids: Vec<Value> = [("em_g", "hashedEmail"), ("ph_g", "hashedPhoneNumber")]
            .iter()
            .filter_map(|(key, field)| user_hash(hashes, key).map(|h| json!({ *field: h })))
            .collect();
        if !ids.is_empty() {
            c.insert("userIdentifiers".into(), Value::Array(ids));
        }
    }
    Ok(Value::Object(c))
}

/// Sends one request of at most [`MAX_CONVERSIONS`] events; one verdict per event.
fn send_chunk(
    http: &Http,
    dest: &Destination,
    cfg: &Config<'_>,
    events: &[Event<'_>],
    now_ms: i64,
) -> Result<Vec<Verdict>, Outage> {
    // `slot[i]`: the index in the request of event i, or the verdict it got without one.
    let mut conversions = Vec::with_capacity(events.len());
    let mut slots: Vec<Result<usize, Verdict>> = Vec::with_capacity(events.len());
    for e in events {
        slots.push(
            conversion(cfg, e)
                .map(|c| {
                    conversions.push(c);
                    conversions.len() - 1
                })
                .map_err(|u| Verdict::Failed(u.0)),
        );
    }
    if conversions.is_empty() {
        return Ok(slots.into_iter().map(|s| s.unwrap_err()).collect());
    }
    let answer = upload(http, dest, cfg, &conversions, false, now_ms)?;
    let errors = partial_failure(cfg, &answer.body)?;
    let per_op = per_operation(&errors, conversions.len(), "conversions")?;
    Ok(slots
        .into_iter()
        .map(|s| match s {
            Ok(i) => verdict(&per_op[i]),
            Err(v) => v,
        })
        .collect())
}

/// A partial failure's errors placed on the operations of the request (`sent` of them, of `what`:
/// conversions or adjustments). An error that names no operation of a request of several fails
/// the request (sent one by one, each error then falls on its own operation); an error of the
/// destination's settings fails it as unauthorized.
fn per_operation<'e>(
    errors: &'e [RowError],
    sent: usize,
    what: &str,
) -> Result<Vec<Vec<&'e RowError>>, Outage> {
    let mut per_op: Vec<Vec<&RowError>> = vec![Vec::new(); sent];
    let mut unplaced = Vec::new();
    for e in errors {
        match e.index {
            Some(i) if i < sent => per_op[i].push(e),
            _ if sent == 1 => per_op[0].push(e),
            _ => unplaced.push(format!("{}: {}", e.code, e.message)),
        }
    }
    if !unplaced.is_empty() {
        return Err(Outage::Rejected(format!(
            "Google Ads refused {what} without saying which: {}",
            unplaced.join("; ")
        )));
    }
    if let Some(e) = errors.iter().find(|e| e.class == Class::Destination) {
        return Err(Outage::Unauthorized(format!(
            "Google Ads refused the destination's settings: {}: {}",
            e.code, e.message
        )));
    }
    Ok(per_op)
}

/// The verdict of one conversion from its errors: a refusal over a wait over a repeat.
fn verdict(errors: &[&RowError]) -> Verdict {
    let text = |class: Class| {
        errors
            .iter()
            .filter(|e| e.class == class)
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if errors.iter().any(|e| e.class == Class::Failed) {
        return Verdict::Failed(text(Class::Failed));
    }
    if errors.iter().any(|e| e.class == Class::Retry) {
        return Verdict::Retry {
            error: text(Class::Retry),
            after_ms: errors.iter().filter_map(|e| e.after_ms).max(),
        };
    }
    Verdict::Delivered
}

/// What one error of `partialFailureError` means for its conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Google has it already.
    Delivered,
    Retry,
    Failed,
    /// The destination's settings or account, not the conversion.
    Destination,
}

#[derive(Debug)]
struct RowError {
    /// The conversion's index in the request, when Google named one.
    index: Option<usize>,
    /// `conversionUploadError TOO_RECENT_EVENT`.
    code: String,
    message: String,
    class: Class,
    after_ms: Option<i64>,
    /// `details.quotaErrorDetails.retryDelay` of a quota error: the wait Google asks for.
    retry_delay_ms: Option<i64>,
}

/// A protobuf `Duration` as JSON spells it (`"30s"`, `"1.5s"`), in milliseconds.
fn duration_ms(v: &Value) -> Option<i64> {
    let secs: f64 = v.as_str()?.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1_000.0).ceil() as i64)
}

/// The error code of a `GoogleAdsError`: its one `errorCode` member, as (family, code).
fn error_code(e: &Value) -> (String, String) {
    e.get("errorCode")
        .and_then(Value::as_object)
        .and_then(|m| m.iter().next())
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .unwrap_or_default()
}

fn classify(family: &str, code: &str) -> (Class, Option<i64>) {
    if ALREADY_THERE.contains(&code) {
        (Class::Delivered, None)
    } else if TOO_RECENT.contains(&code) {
        (Class::Retry, Some(TOO_RECENT_WAIT_MS))
    } else if DESTINATION_ERRORS.contains(&code)
        || family == "authenticationError"
        || family == "authorizationError"
    {
        (Class::Destination, None)
    } else if family == "internalError" || family == "quotaError" {
        (Class::Retry, None)
    } else {
        (Class::Failed, None)
    }
}

/// The errors of a `GoogleAdsFailure` list (`details[].errors[]` of a `Status`).
fn failure_errors(cfg: &Config<'_>, status: &Value, token: Option<&str>) -> Vec<RowError> {
    let mut out = Vec::new();
    let details = status.get("details").and_then(Value::as_array);
    for e in details
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("errors").and_then(Value::as_array))
        .flatten()
    {
        let (family, code) = error_code(e);
        let index = e
            .pointer("/location/fieldPathElements")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| {
                matches!(
                    p.get("fieldName").and_then(Value::as_str),
                    Some("conversions" | "conversion_adjustments" | "conversionAdjustments")
                )
            })
            .and_then(|p| p.get("index"))
            .and_then(Value::as_u64)
            .map(|i| i as usize);
        let (class, after_ms) = classify(&family, &code);
        out.push(RowError {
            index,
            code: if code.is_empty() {
                "error".into()
            } else {
                code
            },
            message: cfg.scrub(
                e.get("message").and_then(Value::as_str).unwrap_or_default(),
                token,
            ),
            class,
            after_ms,
            retry_delay_ms: e
                .pointer("/details/quotaErrorDetails/retryDelay")
                .and_then(duration_ms),
        });
    }
    out
}

/// The conversions' errors of a 200 answer (none: every conversion taken). A
/// `partialFailureError` with a code but no error listed counts as one error of no conversion.
fn partial_failure(cfg: &Config<'_>, body: &str) -> Result<Vec<RowError>, Outage> {
    let v: Value = serde_json::from_str(body).map_err(|_| {
        Outage::Transient("Google Ads answered 200 with a body that is not JSON".into())
    })?;
    let Some(pf) = v.get("partialFailureError").filter(|p| !p.is_null()) else {
        return Ok(Vec::new());
    };
    let errors = failure_errors(cfg, pf, None);
    let code = pf.get("code").and_then(Value::as_i64).unwrap_or(0);
    if errors.is_empty() && code != 0 {
        let message = pf
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Ok(vec![RowError {
            index: None,
            code: format!("status {code}"),
            message: cfg.scrub(message, None),
            class: Class::Failed,
            after_ms: None,
            retry_delay_ms: None,
        }]);
    }
    Ok(errors)
}

/// POSTs the conversions with an access token, refreshing it once on a 401; the answer of a
/// 200, or the outage of any other.
fn upload(
    http: &Http,
    dest: &Destination,
    cfg: &Config<'_>,
    conversions: &[Value],
    validate_only: bool,
    now_ms: i64,
) -> Result<Answer, Outage> {
    let mut body = json!({ "conversions": conversions, "partialFailure": true });
    if validate_only {
        body["validateOnly"] = Value::Bool(true);
    }
    post(
        http,
        dest,
        cfg,
        &cfg.upload_url(),
        &body.to_string(),
        now_ms,
    )
}

/// POSTs `body` to `url` with an access token, refreshing it once on a 401; the answer of a
/// 200, or the outage of any other.
fn post(
    http: &Http,
    dest: &Destination,
    cfg: &Config<'_>,
    url: &str,
    body: &str,
    now_ms: i64,
) -> Result<Answer, Outage> {
    let key = cfg.cache_key(dest);
    let mut refreshed = false;
    loop {
        let token = access_token(http, cfg, &key, now_ms, refreshed)?;
        let bearer = format!("Bearer {token}");
        let mut headers = vec![
            ("Authorization", bearer.as_str()),
            ("developer-token", cfg.developer_token),
        ];
        if let Some(l) = &cfg.login_customer_id {
            headers.push(("login-customer-id", l.as_str()));
        }
        let answer = http
            .post(url, &headers, "application/json", body)
            .map_err(|e| {
                Outage::Transient(format!("Google Ads: {}", cfg.scrub(&e.0, Some(&token))))
            })?;
        if answer.status == 401 && !refreshed {
            forget_token(&key);
            refreshed = true;
            continue;
        }
        if answer.status == 401 {
            forget_token(&key);
        }
        return match outage(cfg, &answer, &token) {
            Some(o) => Err(o),
            // Google's messages may quote the request: the token goes before anyone reads them.
            None => Ok(Answer {
                body: answer.body.replace(&token, "[redacted]"),
                ..answer
            }),
        };
    }
}

/// The outage an answer other than 200 means (`None` for a 200).
fn outage(cfg: &Config<'_>, answer: &Answer, token: &str) -> Option<Outage> {
    if answer.status == 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    let err = v.get("error").unwrap_or(&Value::Null);
    let status = err
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let errors = failure_errors(cfg, err, Some(token));
    let mut text = format!("Google Ads: HTTP {}", answer.status);
    if !status.is_empty() {
        text.push_str(&format!(" {status}"));
    }
    if !message.is_empty() {
        text.push_str(&format!(": {}", cfg.scrub(message, Some(token))));
    }
    if !errors.is_empty() {
        let listed: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect();
        text.push_str(&format!(" ({})", listed.join("; ")));
    }
    let s = answer.status;
    if errors.iter().any(|e| e.code == VERSION_GONE_CODE) {
        return Some(Outage::VersionGone {
            version: cfg.version.clone(),
            error: super::versions::version_gone_message(GOOGLE_ADS.label, &cfg.version, &text),
        });
    }
    Some(if s == 429 || status == "RESOURCE_EXHAUSTED" {
        Outage::Throttled {
            error: text,
            retry_after_ms: answer
                .retry_after_ms
                .or_else(|| errors.iter().filter_map(|e| e.retry_delay_ms).max()),
        }
    } else if s >= 500
        || matches!(
            status,
            "UNAVAILABLE" | "INTERNAL" | "DEADLINE_EXCEEDED" | "UNKNOWN" | "ABORTED"
        )
    {
        Outage::Transient(text)
    } else if s == 401
        || s == 403
        || s == 404
        || matches!(
            status,
            "UNAUTHENTICATED" | "PERMISSION_DENIED" | "NOT_FOUND"
        )
        || errors.iter().any(|e| e.class == Class::Destination)
    {
        Outage::Unauthorized(text)
    } else {
        Outage::Rejected(text)
    })
}

/// An access token and the time (epoch ms) it stops being used.
struct Cached {
    token: String,
    until_ms: i64,
}

/// The access tokens of this process, per destination and credentials.
fn tokens() -> &'static Mutex<HashMap<String, Cached>> {
    static TOKENS: OnceLock<Mutex<HashMap<String, Cached>>> = OnceLock::new();
    TOKENS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn forget_token(key: &str) {
    tokens()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
}

/// The destination's access token: the cached one while it is valid (unless `fresh`), else one
/// exchanged for the refresh token at the token endpoint (`grant_type=refresh_token`).
fn access_token(
    http: &Http,
    cfg: &Config<'_>,
    key: &str,
    now_ms: i64,
    fresh: bool,
) -> Result<String, Outage> {
    if !fresh {
        let cache = tokens().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(key).filter(|c| now_ms < c.until_ms) {
            return Ok(c.token.clone());
        }
    }
    let form = form_urlencoded::Serializer::new(String::new())
        .append_pair("client_id", cfg.client_id)
        .append_pair("client_secret", cfg.client_secret)
        .append_pair("refresh_token", cfg.refresh_token)
        .append_pair("grant_type", "refresh_token")
        .finish();
    let answer = http
        .post(
            &cfg.token_url,
            &[],
            "application/x-www-form-urlencoded",
            &form,
        )
        .map_err(|e| {
            Outage::Transient(format!(
                "Google OAuth token endpoint: {}",
                cfg.scrub(&e.0, None)
            ))
        })?;
    let v: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    if answer.status == 200 {
        let token = v
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Outage::Transient(
                    "Google OAuth token endpoint answered without an access_token".into(),
                )
            })?;
        let expires_in_ms = v
            .get("expires_in")
            .and_then(Value::as_i64)
            .unwrap_or(3_600)
            .saturating_mul(1_000);
        tokens().lock().unwrap_or_else(|p| p.into_inner()).insert(
            key.to_string(),
            Cached {
                token: token.to_string(),
                until_ms: now_ms + expires_in_ms - TOKEN_MARGIN_MS,
            },
        );
        return Ok(token.to_string());
    }
    Err(token_refused(cfg, answer.status, answer.retry_after_ms, &v))
}

/// The outage of a token endpoint's answer other than 200 (`v`: its JSON body).
fn token_refused(cfg: &Config<'_>, status: u16, retry_after_ms: Option<i64>, v: &Value) -> Outage {
    let error = v.get("error").and_then(Value::as_str).unwrap_or_default();
    let description = v
        .get("error_description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = cfg.scrub(
        &format!(
            "Google OAuth token endpoint: HTTP {status} {error}{}{description}",
            if description.is_empty() { "" } else { ": " }
        ),
        None,
    );
    if status == 429 {
        Outage::Throttled {
            error: text,
            retry_after_ms,
        }
    } else if status >= 500 {
        Outage::Transient(text)
    } else {
        // invalid_grant (a refresh token expired or revoked), invalid_client, unauthorized_client:
        // only new credentials help.
        Outage::Unauthorized(text)
    }
}

/// Most adjustments in one upload request (`TOO_MANY_ADJUSTMENTS_IN_REQUEST` above it).
pub const MAX_ADJUSTMENTS: usize = 2_000;

/// The adjustment errors that mean Google has the adjustment in effect already.
pub const ADJUSTMENT_IN_EFFECT: &[&str] = &[
    ADJUSTMENT_RETRACTED,
    "MORE_RECENT_RESTATEMENT_FOUND",
    "RESTATEMENT_ALREADY_EXISTS",
];
/// The conversion is retracted: in effect for a retraction (a repeat), but Google Ads restates
/// no retracted conversion, so for a restatement it means the net value cannot be passed on.
pub const ADJUSTMENT_RETRACTED: &str = "CONVERSION_ALREADY_RETRACTED";
/// The adjustment errors that clear by themselves: the conversion (or its action) is too new to
/// be adjusted; tried again after [`TOO_RECENT_WAIT_MS`].
pub const ADJUSTMENT_TOO_RECENT: &[&str] =
    &["TOO_RECENT_CONVERSION", "TOO_RECENT_CONVERSION_ACTION"];
/// The adjustment error of a conversion Google does not know (yet).
pub const ADJUSTMENT_NOT_FOUND: &str = "CONVERSION_NOT_FOUND";
/// The adjustment error of a conversion too old to adjust.
pub const ADJUSTMENT_EXPIRED: &str = "CONVERSION_EXPIRED";

/// One adjustment of an order as `uploadConversionAdjustments` takes it.
#[derive(Debug, Clone)]
pub struct AdjustmentUpload<'a> {
    /// The order's conversion, as its upload was made of it.
    pub facts: &'a Facts,
    /// The destination's event name of the conversion's type (the conversion action it went to).
    pub event_name: &'a str,
    /// `adjustmentDateTime`, epoch ms.
    pub at_ms: i64,
    /// `None`: a `RETRACTION`; else a `RESTATEMENT` to this absolute value (decimal text) in the
    /// order's currency.
    pub restated: Option<&'a str>,
}

/// One `ConversionAdjustment` of the REST interface (camelCase), keyed like the conversion's
/// upload: its `orderId` and its conversion action.
pub fn adjustment_json(dest: &Destination, a: &AdjustmentUpload<'_>) -> Result<Value, Outage> {
    let cfg = Config::of(dest)?;
    adjustment(&cfg, a).map_err(|u| Outage::Rejected(u.0))
}

fn adjustment(cfg: &Config<'_>, a: &AdjustmentUpload<'_>) -> Result<Value, Unsendable> {
    let action = action_resource(&cfg.customer_id, a.event_name)
        .unwrap_or_else(|| cfg.conversion_action.clone());
    let mut m = Map::new();
    m.insert("orderId".into(), json!(dedup_key(a.facts)));
    m.insert("conversionAction".into(), json!(action));
    m.insert(
        "adjustmentDateTime".into(),
        json!(conversion_date_time(a.at_ms)),
    );
    match a.restated {
        None => {
            m.insert("adjustmentType".into(), json!("RETRACTION"));
        }
        Some(v) => {
            let n = decimal(v)
                .ok_or_else(|| Unsendable(format!("the restated value '{v}' is not a number")))?;
            m.insert("adjustmentType".into(), json!("RESTATEMENT"));
            m.insert(
                "restatementValue".into(),
                json!({"adjustedValue": n, "currencyCode": a.facts.currency}),
            );
        }
    }
    Ok(Value::Object(m))
}

/// Uploads adjustments (at most [`MAX_ADJUSTMENTS`] a request, `partialFailure` on) to
/// `customers/{id}:uploadConversionAdjustments` on the destination's API version: one verdict
/// per adjustment, in order, from the errors `partialFailureError` names by index, or the outage
/// of the whole request.
pub fn send_adjustments(
    http: &Http,
    dest: &Destination,
    items: &[AdjustmentUpload<'_>],
    now_ms: i64,
) -> Result<Vec<AdjustVerdict>, Outage> {
    let cfg = Config::of(dest)?;
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(MAX_ADJUSTMENTS) {
        out.extend(send_adjustment_chunk(http, dest, &cfg, chunk, now_ms)?);
    }
    Ok(out)
}

fn send_adjustment_chunk(
    http: &Http,
    dest: &Destination,
    cfg: &Config<'_>,
    items: &[AdjustmentUpload<'_>],
    now_ms: i64,
) -> Result<Vec<AdjustVerdict>, Outage> {
    let mut sent = Vec::with_capacity(items.len());
    let mut slots: Vec<Result<usize, AdjustVerdict>> = Vec::with_capacity(items.len());
    for a in items {
        slots.push(
            adjustment(cfg, a)
                .map(|v| {
                    sent.push(v);
                    sent.len() - 1
                })
                .map_err(|u| AdjustVerdict::Failed(u.0)),
        );
    }
    if sent.is_empty() {
        return Ok(slots.into_iter().map(|s| s.unwrap_err()).collect());
    }
    let n = sent.len();
    let body = json!({ "conversionAdjustments": sent, "partialFailure": true }).to_string();
    let answer = post(http, dest, cfg, &cfg.adjustments_url(), &body, now_ms)?;
    let errors = partial_failure(cfg, &answer.body)?;
    let per_op = per_operation(&errors, n, "adjustments")?;
    Ok(slots
        .into_iter()
        .zip(items)
        .map(|(s, a)| match s {
            Ok(i) => adjustment_verdict(&per_op[i], a.restated),
            Err(v) => v,
        })
        .collect())
}

/// The verdict of one adjustment from its errors, the gravest first: a refusal, too old, not
/// found yet, too recent, a transient error, a restatement (`restated`: its value) of a retracted
/// conversion, in effect already.
fn adjustment_verdict(errors: &[&RowError], restated: Option<&str>) -> AdjustVerdict {
    let text = |pick: &dyn Fn(&RowError) -> bool| {
        errors
            .iter()
            .filter(|e| pick(e))
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let known = |e: &RowError| {
        ADJUSTMENT_IN_EFFECT.contains(&e.code.as_str())
            || ADJUSTMENT_TOO_RECENT.contains(&e.code.as_str())
            || e.code == ADJUSTMENT_NOT_FOUND
            || e.code == ADJUSTMENT_EXPIRED
            || e.class == Class::Retry
    };
    if errors.iter().any(|e| !known(e)) {
        return AdjustVerdict::Failed(text(&|e| !known(e)));
    }
    let code = |c: &'static str| move |e: &RowError| e.code == c;
    if errors.iter().any(|e| code(ADJUSTMENT_EXPIRED)(e)) {
        return AdjustVerdict::TooOld(text(&code(ADJUSTMENT_EXPIRED)));
    }
    if errors.iter().any(|e| code(ADJUSTMENT_NOT_FOUND)(e)) {
        return AdjustVerdict::NotFound(text(&code(ADJUSTMENT_NOT_FOUND)));
    }
    let recent = |e: &RowError| ADJUSTMENT_TOO_RECENT.contains(&e.code.as_str());
    if errors.iter().any(|e| recent(e)) {
        return AdjustVerdict::Hold {
            error: text(&recent),
            after_ms: TOO_RECENT_WAIT_MS,
        };
    }
    let in_effect = |e: &RowError| ADJUSTMENT_IN_EFFECT.contains(&e.code.as_str());
    if errors.iter().any(|e| !in_effect(e)) {
        return AdjustVerdict::Retry {
            error: text(&|e| !in_effect(e)),
            after_ms: errors.iter().filter_map(|e| e.retry_delay_ms).max(),
        };
    }
    if errors.is_empty() {
        return AdjustVerdict::Delivered;
    }
    let retracted = code(ADJUSTMENT_RETRACTED);
    if let Some(v) = restated.filter(|_| errors.iter().any(|e| retracted(e))) {
        // Google keeps the conversion at 0 while the order's net value is above it.
        return AdjustVerdict::NotSupported(format!(
            "Google Ads cannot restate a retracted conversion: the order's net value {v} is not \
             passed on, Google keeps 0 ({})",
            text(&retracted)
        ));
    }
    AdjustVerdict::InEffect(text(&in_effect))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_retry_delays_read_as_protobuf_durations() {
        assert_eq!(duration_ms(&json!("30s")), Some(30_000));
        assert_eq!(duration_ms(&json!("1.5s")), Some(1_500));
        assert_eq!(duration_ms(&json!("30")), None);
        assert_eq!(duration_ms(&json!(30)), None);
    }

    #[test]
    fn conversion_date_time_is_utc_with_its_offset() {
        assert_eq!(conversion_date_time(0), "1970-01-01 00:00:00+00:00");
        assert_eq!(
            conversion_date_time(1_700_000_000_123),
            "2023-11-14 22:13:20+00:00"
        );
    }

    #[test]
    fn customer_ids_lose_their_dashes_and_actions_take_an_id_or_a_resource_name() {
        assert_eq!(customer_digits("123-456-7890", "c").unwrap(), "1234567890");
        assert!(customer_digits("12a", "c").is_err());
        assert!(customer_digits("", "c").is_err());
        assert_eq!(
            action_resource("1", "42").unwrap(),
            "customers/1/conversionActions/42"
        );
        assert_eq!(
            action_resource("1", "customers/9/conversionActions/42").unwrap(),
            "customers/9/conversionActions/42"
        );
        assert_eq!(action_resource("1", "purchase"), None);
        assert_eq!(
            action_resource("1", "customers/x/conversionActions/1"),
            None
        );
    }
}
