#!/usr/bin/env bash
# Install the Debian 12 RTR clients the interop suite runs (make interop). Idempotent, non-interactive.
#
# - apt-get update runs at most once, and only when a package is missing.
# - No service may start: there is no systemd, and a sysvinit script started by a postinst would
#   leave a daemon on a default port. /usr/sbin/policy-rc.d must exit 101 ("action forbidden")
#   during the install; if it does not, a temporary one is put in place and removed afterwards.
# - A package that cannot be installed, or a binary the suite needs that is missing afterwards,
#   fails the script (non-zero exit). Nothing is skipped silently.
# - OpenBGPD needs the user _openbgpd and the directory /run/openbgpd (lab gotcha G4).
set -euo pipefail

PACKAGES=(stayrtr rtr-tools bird2 frr frr-rpki-rtrlib gobgpd openbgpd)
BINARIES=(
    /usr/bin/rtrdump /usr/bin/rtrclient
    /usr/sbin/bird /usr/sbin/birdc
    /usr/lib/frr/bgpd /usr/bin/vtysh
    /usr/bin/gobgpd /usr/bin/gobgp
    /usr/sbin/bgpd /usr/sbin/bgpctl
)
POLICY=/usr/sbin/policy-rc.d
APT_OPTS=(-y -q -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
export DEBIAN_FRONTEND=noninteractive

die() { echo "interop-setup: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (apt-get, useradd, /run/openbgpd)"

installed() {  # installed PKG -> 0 when dpkg has it fully installed
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done

if [ ${#missing[@]} -gt 0 ]; then
    echo "interop-setup: installing ${missing[*]}"
    temp_policy=""
    if ! { [ -x "$POLICY" ] && { "$POLICY" x start >/dev/null 2>&1; [ $? -eq 101 ]; }; }; then
        # No policy (or one that allows starts): forbid every service start for this install only.
        [ -e "$POLICY" ] && mv "$POLICY" "$POLICY.interop-setup.bak"
        printf '#!/bin/sh\n# temporary, from .ci/interop-setup.sh\nexit 101\n' > "$POLICY"
        chmod 755 "$POLICY"
        temp_policy=1
        echo "interop-setup: temporary $POLICY (exit 101) in place for the install"
    fi
    restore_policy() {
        if [ -n "$temp_policy" ]; then
            rm -f "$POLICY"
            [ -e "$POLICY.interop-setup.bak" ] && mv "$POLICY.interop-setup.bak" "$POLICY"
        fi
        return 0
    }
    trap restore_policy EXIT

    # apt-get update once; a concurrent apt run holds the lists lock, so retry a few times.
    for attempt in 1 2 3 4 5; do
        if apt-get -q -o DPkg::Lock::Timeout=600 update; then break; fi
        [ "$attempt" = 5 ] && die "apt-get update failed 5 times"
        echo "interop-setup: apt-get update failed (attempt $attempt), retrying in 10 s" >&2
        sleep 10
    done
    apt-get install "${APT_OPTS[@]}" "${missing[@]}" \
        || die "apt-get install ${missing[*]} failed"
    restore_policy
    trap - EXIT
else
    echo "interop-setup: all packages already installed"
fi

for p in "${PACKAGES[@]}"; do
    installed "$p" || die "package $p is not installed after apt-get"
done
for b in "${BINARIES[@]}"; do
    [ -e "$b" ] || die "$b is missing although its package is installed"
done
# FRR's rpki module lives under the multiarch lib dir (bgpd -M rpki loads it from there).
dpkg-query -L frr-rpki-rtrlib | grep -q '/bgpd_rpki\.so$' || die "frr-rpki-rtrlib ships no bgpd_rpki.so"

# OpenBGPD (G4): privsep user and chroot directory.
if ! getent passwd _openbgpd >/dev/null; then
    useradd --system --home-dir /run/openbgpd --no-create-home --shell /usr/sbin/nologin _openbgpd
fi
mkdir -p /run/openbgpd

# The packages must not have left daemons running (no systemd; policy-rc.d forbids starts).
for name in bird gobgpd bgpd zebra watchfrr stayrtr; do
    if pgrep -x "$name" >/dev/null; then
        echo "interop-setup: note: a process named $name is running (not started by this script)"
    fi
done

echo "interop-setup: versions"
for p in "${PACKAGES[@]}"; do
    printf '  %-16s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p")"
done
echo "interop-setup: ok"
