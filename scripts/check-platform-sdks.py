#!/usr/bin/env python3
"""Checks convapi's outgoing bodies against the platforms' own client libraries.

tests/forward_sdk.rs sends a conversion for every mapping rule to fake platforms and writes each
request it caught to a directory, one JSON file per request:

    {"platform": "meta" | "google_ads", "case": "...", "path": "/v26.0/…/events",
     "body": {...}, "people": [{"email": raw or null, "phone": raw or null,
                                "phone_e164": the number in E.164, written by hand, or null}, …]}

(`people[i]` is what the backend sent of event i's person), and `versions.json`, convapi's
defaults: {"platform": "versions", "case": "defaults", "meta": "v26.0", "google_ads": "v26",
"google_ads_version_gone": "UNSUPPORTED_VERSION"}. This script, run by that test, checks:

- the defaults: the versions the libraries target (`facebook-business`' API_VERSION, `google-ads`'
  default version), and Google's "version gone" code one of that version's `RequestError`s;

- Meta: the path's version is the one the `facebook-business` SDK targets; every event rebuilt
  from our JSON as the SDK's `serverside.Event` (UserData, CustomData, ActionSource) normalises to
  exactly what convapi sent; each `em`/`ph` digest is the SDK's `Normalize` of the raw e-mail and
  of the E.164 number (the SDK keeps a trunk `0` written as `(0)`, which is no digit of the
  number); and Meta's documented rules the SDK leaves to the server: a website event carries
  `client_user_agent` and `event_source_url`, a Purchase its value and currency.
- Google Ads: the path's version is one the `google-ads` library ships, and the body parses
  strictly (no unknown field) as that version's `UploadClickConversionsRequest`;
  `conversionDateTime` has the documented `yyyy-mm-dd hh:mm:ss+|-hh:mm` form; `hashedEmail` and
  `hashedPhoneNumber` are SHA-256 of Google's normalisation (trimmed, lower-case, a gmail.com or
  googlemail.com local part without dots; the phone in E.164).
- Google Ads' adjustments (`"platform": "google_ads_adjustments"`): the body parses strictly as
  the version's `UploadConversionAdjustmentsRequest`, each a RETRACTION without a value or a
  RESTATEMENT with one, at a documented time; the error codes convapi maps (`mapped_errors`) are
  the version's `ConversionAdjustmentUploadError`s.
- GA4's refund (`"platform": "ga4_refund"`): no library exists; the documented fields.

Exit 0 when every file passes, 1 listing each problem, 2 when the libraries are missing.
Usage: check-platform-sdks.py DIR
"""

import hashlib
import importlib
import json
import re
import sys
from pathlib import Path

INSTALL = (
    "install the platforms' client libraries: "
    "python3 -m pip install 'facebook-business==26.0.3' 'google-ads==34.0.0' "
    "(scripts/install-test-deps.sh does)"
)

try:
    from facebook_business import apiconfig
    from facebook_business.adobjects.serverside.action_source import ActionSource
    from facebook_business.adobjects.serverside.custom_data import CustomData
    from facebook_business.adobjects.serverside.event import Event
    from facebook_business.adobjects.serverside.normalize import Normalize
    from facebook_business.adobjects.serverside.user_data import UserData
    from google.ads.googleads import client as ads_client
    from google.protobuf import json_format
except ImportError as e:
    print(f"check-platform-sdks: {e}: {INSTALL}", file=sys.stderr)
    sys.exit(2)

E164 = re.compile(r"^\+[1-9][0-9]{1,14}$")
ADS_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$")


def sha256(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def sorted_lists(v):
    """The SDK dedups lists through a set: compare them in order."""
    if isinstance(v, dict):
        return {k: sorted_lists(x) for k, x in v.items()}
    if isinstance(v, list):
        return sorted(sorted_lists(x) for x in v)
    return v


def check_meta(f, problems):
    version = apiconfig.ads_api_config["API_VERSION"]
    if not f["path"].startswith(f"/{version}/"):
        problems.append(f"path {f['path']} is not the SDK's version {version}")
    data = f["body"].get("data") or []
    if not data:
        problems.append("no data")
    for i, (e, person) in enumerate(zip(data, f["people"])):
        where = f"data[{i}]"
        u = e.get("user_data", {})
        c = e.get("custom_data", {})
        user = UserData(
            emails=u.get("em"),
            phones=u.get("ph"),
            external_ids=u.get("external_id"),
            client_ip_address=u.get("client_ip_address"),
            client_user_agent=u.get("client_user_agent"),
            fbc=u.get("fbc"),
            fbp=u.get("fbp"),
        )
        custom = CustomData(
            value=c.get("value"), currency=c.get("currency"), order_id=c.get("order_id")
        )
        try:
            event = Event(
                event_name=e.get("event_name"),
                event_time=e.get("event_time"),
                event_id=e.get("event_id"),
                event_source_url=e.get("event_source_url"),
                action_source=ActionSource(e.get("action_source")),
                user_data=user,
                custom_data=custom,
            )
            rebuilt = event.normalize()
        except (TypeError, ValueError) as err:
            problems.append(f"{where}: Meta's SDK refuses it: {err}")
            continue
        if sorted_lists(rebuilt) != sorted_lists(e):
            problems.append(
                f"{where}: Meta's SDK normalises it to {json.dumps(rebuilt, sort_keys=True)}, "
                f"convapi sent {json.dumps(e, sort_keys=True)}"
            )
        if person.get("email"):
            want = Normalize.normalize_field("em", person["email"])
            if u.get("em") != [want]:
                problems.append(f"{where}: em {u.get('em')} is not the SDK's {want}")
        if person.get("phone"):
            want = Normalize.normalize_field("ph", person["phone_e164"])
            if u.get("ph") != [want]:
                problems.append(
                    f"{where}: ph {u.get('ph')} is not the SDK's {want} of {person['phone_e164']}"
                )
        if e.get("action_source") == "website" and not (
            u.get("client_user_agent") and e.get("event_source_url")
        ):
            problems.append(f"{where}: a website event needs client_user_agent and event_source_url")
        if e.get("event_name") == "Purchase" and (
            c.get("value") is None or not c.get("currency")
        ):
            problems.append(f"{where}: a Purchase needs value and currency")
    if len(data) != len(f["people"]):
        problems.append(f"{len(data)} events for {len(f['people'])} people")


def google_email(raw):
    e = raw.strip().lower()
    local, _, domain = e.partition("@")
    if domain in ("gmail.com", "googlemail.com"):
        e = local.replace(".", "") + "@" + domain
    return e


def check_google_ads(f, problems):
    m = re.match(r"^/(v\d+)/customers/\d+:uploadClickConversions$", f["path"])
    if not m:
        problems.append(f"path {f['path']}")
        return
    version = m.group(1)
    if version not in ads_client._VALID_API_VERSIONS:
        problems.append(
            f"{version} is not a version google-ads ships ({ads_client._VALID_API_VERSIONS})"
        )
        return
    service = importlib.import_module(
        f"google.ads.googleads.{version}.services.types.conversion_upload_service"
    )
    request = service.UploadClickConversionsRequest.pb()()
    try:
        json_format.Parse(json.dumps(f["body"]), request, ignore_unknown_fields=False)
    except json_format.ParseError as err:
        problems.append(f"not an {version} UploadClickConversionsRequest: {err}")
        return
    convs = f["body"].get("conversions", [])
    for i, (c, person) in enumerate(zip(convs, f["people"])):
        where = f"conversions[{i}]"
        if not ADS_DATE_TIME.match(c.get("conversionDateTime", "")):
            problems.append(f"{where}: conversionDateTime {c.get('conversionDateTime')!r}")
        ids = {k: v for x in c.get("userIdentifiers", []) for k, v in x.items()}
        if person.get("email") and "hashedEmail" in ids:
            want = sha256(google_email(person["email"]))
            if ids["hashedEmail"] != want:
                problems.append(f"{where}: hashedEmail is not Google's {want}")
        if person.get("phone") and "hashedPhoneNumber" in ids:
            e164 = person["phone_e164"]
            if not E164.match(e164):
                problems.append(f"{where}: the case's number {e164} is not E.164")
            if ids["hashedPhoneNumber"] != sha256(e164):
                problems.append(f"{where}: hashedPhoneNumber is not the digest of {e164}")
    if len(convs) != len(f["people"]):
        problems.append(f"{len(convs)} conversions for {len(f['people'])} people")


def check_google_ads_adjustments(f, problems):
    """An upload of adjustments parses strictly as the path version's
    `UploadConversionAdjustmentsRequest`; each is a RETRACTION without a value or a RESTATEMENT
    with one, at a documented time; every error code convapi maps is one of that version's
    `ConversionAdjustmentUploadError`s."""
    m = re.match(r"^/(v\d+)/customers/\d+:uploadConversionAdjustments$", f["path"])
    if not m:
        problems.append(f"path {f['path']}")
        return
    version = m.group(1)
    service = importlib.import_module(
        f"google.ads.googleads.{version}.services.types.conversion_adjustment_upload_service"
    )
    request = service.UploadConversionAdjustmentsRequest.pb()()
    try:
        json_format.Parse(json.dumps(f["body"]), request, ignore_unknown_fields=False)
    except json_format.ParseError as err:
        problems.append(f"not an {version} UploadConversionAdjustmentsRequest: {err}")
        return
    if not request.partial_failure:
        problems.append("partial_failure is not set")
    types = importlib.import_module(
        f"google.ads.googleads.{version}.enums.types.conversion_adjustment_type"
    ).ConversionAdjustmentTypeEnum.ConversionAdjustmentType
    for i, a in enumerate(request.conversion_adjustments):
        where = f"conversion_adjustments[{i}]"
        if not a.order_id or not a.conversion_action:
            problems.append(f"{where}: no order_id or conversion_action")
        if not ADS_DATE_TIME.match(a.adjustment_date_time):
            problems.append(f"{where}: adjustment_date_time {a.adjustment_date_time!r}")
        restated = a.HasField("restatement_value")
        if a.adjustment_type == types.RESTATEMENT.value:
            if not restated or not a.restatement_value.currency_code:
                problems.append(f"{where}: a RESTATEMENT without its value and currency")
        elif a.adjustment_type == types.RETRACTION.value:
            if restated:
                problems.append(f"{where}: a RETRACTION with a value")
        else:
            problems.append(f"{where}: adjustment_type {a.adjustment_type}")
    errors = importlib.import_module(
        f"google.ads.googleads.{version}.errors.types.conversion_adjustment_upload_error"
    ).ConversionAdjustmentUploadErrorEnum.ConversionAdjustmentUploadError
    for code in f.get("mapped_errors", []):
        if not hasattr(errors, code):
            problems.append(f"{version} has no ConversionAdjustmentUploadError {code}")


def check_ga4_refund(f, problems):
    """GA4 publishes no library: a refund event by its documented rules (a `refund` with the
    purchase's `transaction_id`, a number `value` and its `currency`, for one `client_id`)."""
    if f["path"] != "/mp/collect":
        problems.append(f"path {f['path']}")
    body = f["body"]
    if not isinstance(body.get("client_id"), str) or not body["client_id"]:
        problems.append("no client_id")
    events = body.get("events", [])
    if len(events) != 1 or events[0].get("name") != "refund":
        problems.append(f"events {events}")
        return
    p = events[0].get("params", {})
    if not isinstance(p.get("transaction_id"), str) or not p["transaction_id"]:
        problems.append("no transaction_id")
    if not isinstance(p.get("value"), (int, float)) or p["value"] <= 0:
        problems.append(f"value {p.get('value')!r}")
    if not re.match(r"^[A-Z]{3}$", p.get("currency", "")):
        problems.append(f"currency {p.get('currency')!r}")


def check_versions(f, problems):
    """convapi's defaults are the versions the libraries target, and its "version gone" code is
    one Google's errors define."""
    meta = apiconfig.ads_api_config["API_VERSION"]
    if f["meta"] != meta:
        problems.append(f"convapi sends Meta {f['meta']}, facebook-business targets {meta}")
    ads = ads_client._DEFAULT_VERSION
    if f["google_ads"] != ads:
        problems.append(f"convapi sends Google Ads {f['google_ads']}, google-ads defaults to {ads}")
    errors = importlib.import_module(f"google.ads.googleads.{ads}.errors.types.request_error")
    if not hasattr(errors.RequestErrorEnum.RequestError, f["google_ads_version_gone"]):
        problems.append(f"google-ads {ads} has no RequestError {f['google_ads_version_gone']}")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = sorted(Path(sys.argv[1]).glob("*.json"))
    if not files:
        print(f"check-platform-sdks: no request in {sys.argv[1]}", file=sys.stderr)
        return 1
    failed = 0
    for path in files:
        f = json.loads(path.read_text())
        problems = []
        checks = {
            "meta": check_meta,
            "google_ads": check_google_ads,
            "google_ads_adjustments": check_google_ads_adjustments,
            "ga4_refund": check_ga4_refund,
            "versions": check_versions,
        }
        checks[f["platform"]](f, problems)
        for p in problems:
            print(f"{path.name} ({f['case']}): {p}", file=sys.stderr)
        failed += bool(problems)
    print(f"check-platform-sdks: {len(files) - failed} of {len(files)} requests pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
