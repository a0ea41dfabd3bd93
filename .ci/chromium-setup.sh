#!/usr/bin/env bash
# Install headless Chromium (Debian package `chromium`) for the dashboard test
# (tests/http/test_dashboard.py). Idempotent and non-interactive; fails loudly.
#
# - Nothing happens when a chromium binary is already on PATH.
# - apt-get update runs only when the package is missing.
# - A failed install, or no working `chromium --version` afterwards, exits non-zero.
set -euo pipefail

die() { echo "chromium-setup: ERROR: $*" >&2; exit 1; }

if command -v chromium >/dev/null 2>&1; then
    echo "chromium-setup: $(chromium --version 2>/dev/null || echo 'chromium present')"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "chromium is missing and installing it needs root (apt-get install chromium)"

export DEBIAN_FRONTEND=noninteractive
echo "chromium-setup: installing chromium (Debian)"
apt-get update -qq || die "apt-get update failed"
apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends chromium \
    || die "apt-get install chromium failed"
command -v chromium >/dev/null 2>&1 || die "chromium is not on PATH after the install"
chromium --version || die "chromium does not run"
