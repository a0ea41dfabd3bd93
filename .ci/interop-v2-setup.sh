#!/usr/bin/env bash
# Build (once) a Debian 13 chroot with BIRD 2.17 and OpenBGPD 8.8 for interop-tests/v2 (RTR v2/ASPA).
#
# Idempotent: an existing chroot that runs both daemons at the expected versions is reused; a
# broken or half-built one is removed and built again. The build goes to a temporary directory and
# is renamed into place only once it works. Nothing stays mounted after this script.
# Needs root. Override the location with INTEROP_V2_ROOT, the mirror with INTEROP_V2_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${INTEROP_V2_ROOT:-$PWD/interop-tests/.cache/trixie-root}
SUITE=trixie
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)

die() {
	echo "interop-v2-setup: ERROR: $*" >&2
	exit 1
}
log() { echo "interop-v2-setup: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"

# The mirror already configured for apt (deb822 file first, then the one-line format).
mirror() {
	if [ -n "${INTEROP_V2_MIRROR:-}" ]; then
		echo "$INTEROP_V2_MIRROR"
		return
	fi
	local f=/etc/apt/sources.list.d/debian.sources uri=""
	if [ -r "$f" ]; then
		# First URIs: of a stanza that is not the security archive.
		uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f")
	fi
	if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || die "no Debian mirror found in $f or /etc/apt/sources.list (set INTEROP_V2_MIRROR)"
	echo "${uri%/}"
}

# Unmount anything left mounted below a directory (deepest first).
unmount_below() {
	local dir
	dir=$(realpath -m "$1")
	awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r |
		while read -r m; do
			log "unmounting leftover $m"
			umount "$m" || umount -l "$m" || die "cannot unmount $m"
		done
}

# Both daemons run in the chroot at the expected versions.
works() {
	local dir=$1 bird bgpd
	[ -x "$dir/usr/sbin/bird" ] && [ -x "$dir/usr/sbin/bgpd" ] || return 1
	bird=$(chroot "$dir" bird --version 2>&1) || return 1
	bgpd=$(chroot "$dir" bgpd -V 2>&1) || return 1
	grep -Eq '^BIRD version 2\.17\.' <<<"$bird" || return 1
	grep -Eq '^OpenBGPD 8\.8' <<<"$bgpd" || return 1
	echo "$bird / $bgpd"
}

# What the daemons need inside the chroot; safe to repeat.
prepare() {
	local dir=$1
	mkdir -p "$dir/lab" "$dir/run/openbgpd"
	chmod 0755 "$dir/run/openbgpd"
	if ! grep -q '^_openbgpd:' "$dir/etc/passwd"; then
		chroot "$dir" useradd --system --user-group --no-create-home \
			--home-dir /run/openbgpd --shell /usr/sbin/nologin _openbgpd ||
			die "cannot create user _openbgpd in the chroot"
	fi
	grep -q '^_openbgpd:' "$dir/etc/passwd" || die "user _openbgpd missing in the chroot"
	# Device nodes a daemon may open; debootstrap normally creates them already.
	for spec in "null c 1 3" "zero c 1 5" "random c 1 8" "urandom c 1 9"; do
		set -- $spec
		[ -c "$dir/dev/$1" ] || { rm -f "$dir/dev/$1"; mknod -m 666 "$dir/dev/$1" "$2" "$3" "$4"; }
	done
}

if [ -e "$ROOT" ]; then
	unmount_below "$ROOT"
	if versions=$(works "$ROOT"); then
		prepare "$ROOT"
		log "reusing $ROOT ($versions), $(du -sh "$ROOT" | cut -f1), $(($(date +%s) - t0)) s"
		exit 0
	fi
	log "$ROOT exists but does not work: rebuilding"
	rm -rf --one-file-system "$ROOT"
fi

if ! command -v debootstrap >/dev/null; then
	log "installing debootstrap"
	apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap >/dev/null 2>&1 || {
		apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null
		apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap
	}
	command -v debootstrap >/dev/null || die "debootstrap not installed"
fi

MIRROR=$(mirror)
TMP="$ROOT.tmp.$$"
mkdir -p "$(dirname "$ROOT")"
# Remove the half-built tree on any failure, unmounting what debootstrap may have left mounted.
trap 'unmount_below "$TMP" || true; rm -rf --one-file-system "$TMP"' EXIT
log "debootstrap $SUITE from $MIRROR into $TMP"
if ! debootstrap --variant=minbase --include=bird2,openbgpd "$SUITE" "$TMP" "$MIRROR" \
	>"$ROOT.debootstrap.log" 2>&1; then
	tail -n 30 "$ROOT.debootstrap.log" >&2
	[ -f "$TMP/debootstrap/debootstrap.log" ] && tail -n 30 "$TMP/debootstrap/debootstrap.log" >&2
	die "debootstrap failed (full log: $ROOT.debootstrap.log)"
fi
unmount_below "$TMP"
rm -rf "$TMP/var/cache/apt/archives/"*.deb
prepare "$TMP"
versions=$(works "$TMP") || {
	chroot "$TMP" bird --version >&2 || true
	chroot "$TMP" bgpd -V >&2 || true
	die "the new chroot does not run BIRD 2.17.x and OpenBGPD 8.8"
}
mv "$TMP" "$ROOT"
trap - EXIT
log "built $ROOT ($versions), $(du -sh "$ROOT" | cut -f1), $(($(date +%s) - t0)) s"
