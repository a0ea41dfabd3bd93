#!/usr/bin/env bash
# Build (once) minbase chroots with real CPython 3.12, 3.13 and 3.14 for interop-tests/test_interpreters.py.
#
# Two chroots under interop-tests/.cache/interpreters/: Debian forky (python3.13, python3.14) and
# Ubuntu noble (python3.12); each holds only its interpreter(s) and their standard library
# (sqlite3 included). The project's pure-Python dependencies come from the host venv on
# PYTHONPATH at run time, so nothing is installed with pip. Idempotent: a chroot whose
# interpreters run (and import sqlite3) is reused; a broken or half-built one is removed and built
# again. Each build goes to a temporary directory renamed into place only once it works. Nothing
# stays mounted after this script.
#
# Debian 12's debootstrap has no script named forky or noble: forky is bootstrapped with its
# `sid` script and noble with `gutsy` (every Ubuntu suite's script since 7.10). noble's Release
# file is checked against Ubuntu's archive keyring as Debian packages it (`ubuntu-keyring`,
# downloaded with apt inside the forky chroot, not installed there); only if that package cannot
# be had is noble bootstrapped with --no-check-gpg, and the script says so.
#
# Needs root. Override the location with INTERPRETERS_ROOT, the mirrors with
# INTERPRETERS_DEBIAN_MIRROR and INTERPRETERS_UBUNTU_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${INTERPRETERS_ROOT:-$PWD/interop-tests/.cache/interpreters}
DEBIAN_MIRROR=${INTERPRETERS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
UBUNTU_MIRROR=${INTERPRETERS_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)

die() {
	echo "interpreters-setup: ERROR: $*" >&2
	exit 1
}
log() { echo "interpreters-setup: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"

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

# Every named interpreter runs in the chroot at its version and has sqlite3; prints the versions.
works() {
	local dir=$1 py out all=""
	shift
	for py in "$@"; do
		[ -x "$dir/usr/bin/$py" ] || return 1
		out=$(chroot "$dir" "/usr/bin/$py" -I -c \
			'import sqlite3, sys; print(sys.version.split()[0], "sqlite", sqlite3.sqlite_version)' \
			2>&1) || return 1
		grep -Eq "^${py#python}\.[0-9]+ sqlite 3\." <<<"$out" || return 1
		all="${all:+$all, }$py $out"
	done
	echo "$all"
}

# build NAME SUITE MIRROR SCRIPT "DEBOOTSTRAP ARGS" PYTHON...: the chroot $BASE/NAME-root.
build() {
	local name=$1 suite=$2 mirror=$3 script=$4 extra=$5 root tmp versions t1
	shift 5
	root="$BASE/$name-root"
	t1=$(date +%s)
	if [ -e "$root" ]; then
		unmount_below "$root"
		if versions=$(works "$root" "$@"); then
			log "reusing $root ($versions), $(du -sh "$root" | cut -f1), $(($(date +%s) - t1)) s"
			return 0
		fi
		log "$root exists but does not work: rebuilding"
		rm -rf --one-file-system "$root"
	fi
	tmp="$root.tmp.$$"
	rm -rf --one-file-system "$tmp"
	mkdir -p "$BASE"
	# Remove the half-built tree on any failure, unmounting what debootstrap may have left mounted.
	trap 'unmount_below "'"$tmp"'" || true; rm -rf --one-file-system "'"$tmp"'"' EXIT
	log "debootstrap $suite from $mirror into $tmp (script $script, with $*)"
	local include
	include=$(
		IFS=,
		echo "$*"
	)
	# shellcheck disable=SC2086 # $extra holds several words on purpose
	if ! debootstrap --variant=minbase --include="$include" $extra "$suite" "$tmp" "$mirror" \
		"/usr/share/debootstrap/scripts/$script" >"$root.debootstrap.log" 2>&1; then
		tail -n 30 "$root.debootstrap.log" >&2
		[ -f "$tmp/debootstrap/debootstrap.log" ] && tail -n 30 "$tmp/debootstrap/debootstrap.log" >&2
		die "debootstrap $suite failed (full log: $root.debootstrap.log)"
	fi
	unmount_below "$tmp"
	rm -rf "$tmp/var/cache/apt/archives/"*.deb
	versions=$(works "$tmp" "$@") || {
		for py in "$@"; do chroot "$tmp" "/usr/bin/$py" -c 'import sqlite3' >&2 || true; done
		die "the new $suite chroot does not run $*"
	}
	mv "$tmp" "$root"
	trap - EXIT
	log "built $root ($versions), $(du -sh "$root" | cut -f1), $(($(date +%s) - t1)) s"
}

# Ubuntu's archive keyring as Debian ships it (package ubuntu-keyring), fetched with the forky
# chroot's apt into $BASE; prints the keyring's path, or nothing when it cannot be had.
ubuntu_keyring() {
	local forky=$BASE/forky-root keyring=$BASE/ubuntu-archive-keyring.gpg work deb
	if [ -s "$keyring" ]; then
		echo "$keyring"
		return 0
	fi
	work=$(mktemp -d "$forky/tmp/keyring.XXXXXX")
	chmod 0777 "$work" # apt downloads as _apt
	cp /etc/resolv.conf "$forky/etc/resolv.conf"
	if chroot "$forky" sh -c "apt-get -q -o Acquire::Check-Valid-Until=false update >/dev/null && cd /tmp/$(basename "$work") && apt-get -q download ubuntu-keyring >/dev/null" >&2; then
		deb=$(ls "$work"/ubuntu-keyring_*.deb 2>/dev/null | head -n 1)
		if [ -n "$deb" ] && dpkg-deb -x "$deb" "$work/x" &&
			[ -s "$work/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" ]; then
			cp "$work/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$keyring.tmp"
			mv "$keyring.tmp" "$keyring"
		fi
	fi
	# The chroot keeps no downloaded lists or packages (it stays minimal).
	rm -rf "$work" "$forky/var/lib/apt/lists/"*_dists_* "$forky/var/cache/apt/"*.bin
	[ -s "$keyring" ] && echo "$keyring"
	return 0
}

if ! command -v debootstrap >/dev/null; then
	log "installing debootstrap"
	apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap >/dev/null 2>&1 || {
		apt-get update -q -o DPkg::Lock::Timeout=300 >/dev/null
		apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap
	}
	command -v debootstrap >/dev/null || die "debootstrap not installed"
fi
for script in sid gutsy; do
	[ -r "/usr/share/debootstrap/scripts/$script" ] || die "debootstrap has no $script script"
done

build forky forky "$DEBIAN_MIRROR" sid "" python3.13 python3.14

noble_check="--no-check-gpg"
if [ ! -e "$BASE/noble-root" ] || ! works "$BASE/noble-root" python3.12 >/dev/null; then
	if keyring=$(ubuntu_keyring) && [ -n "$keyring" ]; then
		noble_check="--keyring=$keyring"
		log "noble is checked against $keyring (Debian's ubuntu-keyring)"
	else
		log "WARNING: Debian's ubuntu-keyring could not be had: noble is bootstrapped with --no-check-gpg"
	fi
fi
build noble noble "$UBUNTU_MIRROR" gutsy "--components=main $noble_check" python3.12

log "done, $(($(date +%s) - t0)) s"
