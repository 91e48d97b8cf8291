#!/usr/bin/env bash
# fresh-debian-check.sh: run the README's two commands on a fresh Debian
# machine that has only Rust, and time them.
#
#   sudo bash scripts/fresh-debian-check.sh          # as root, from any directory
#   KEEP_CHROOT=1 sudo bash scripts/fresh-debian-check.sh   # keep the chroot afterwards
#
# What it does, as root on a Debian/Ubuntu host:
#   1. installs debootstrap with apt-get if it is missing;
#   2. debootstraps Debian bookworm (variant minbase: the Essential packages
#      and apt) into a new directory under /work/chroot-fresh (CHROOT_BASE);
#   3. bind-mounts /proc, /dev (recursively, made a slave) and /sys, and the
#      host's Rust toolchain read-only: /root/.rustup and /root/.cargo/bin.
#      The chroot's ~/.cargo is otherwise its own and empty, so crates are
#      downloaded from crates.io as on a new machine, not taken from the
#      host's cache;
#   4. copies a clean `git clone` of this repository's HEAD commit into
#      /root/leasehold in the chroot (uncommitted changes are not checked),
#      and ../shared/redisson/ (Redisson's jar for the interop run) beside it;
#   5. checks that redis-server is NOT installed in the chroot;
#   6. runs, as root in /root/leasehold with a clean environment
#      (HOME=/root, PATH with /root/.cargo/bin first):
#         cargo xtask demo
#         cargo xtask test
#      and prints how long each step took and which of redis-server,
#      redis-tools and openssl were installed before and after;
#   7. on exit (trap): ends processes still running inside the chroot (by
#      pid, and says so: a test that leaks a redis-server shows up here),
#      unmounts everything, and removes the chroot directory, but only once
#      nothing is mounted under it (KEEP_CHROOT=1 keeps it).
#
# What the "fresh Debian machine with only Rust" has, exactly:
#   - debootstrap --variant=minbase bookworm: Essential packages + apt;
#   - ca-certificates (cargo needs it for https to crates.io; it depends on
#     openssl, so openssl is there too, as on any Debian with
#     ca-certificates), gcc and libc6-dev (rustc links with `cc`; ring builds
#     C), git (the repository was cloned);
#   - apt sources as a Debian installer writes them: bookworm,
#     bookworm-updates, bookworm-security from deb.debian.org;
#   - /root/.rustup and /root/.cargo/bin from the host (rustup's toolchain).
#   The host's local CA certificates (/usr/local/share/ca-certificates/*.crt,
#   if any) are copied in and update-ca-certificates is run: where https
#   goes through a TLS-inspecting egress proxy, as on the machines this was
#   written on, a machine on that network trusts its CA, and cargo cannot
#   reach crates.io without it.
#   Two chroot-only adjustments, not things a machine would have:
#   /usr/sbin/policy-rc.d exits 101, so package scripts do not start daemons
#   (a real machine's systemd would start the packaged redis-server on port
#   6379; the harness uses free ports and does not need it), and
#   /etc/hosts gets a localhost line if debootstrap left none.
#
# Needs: root, network access to deb.debian.org and crates.io, about 4 GB
# free under CHROOT_BASE. Takes 10-20 minutes on 2 cores (a cold build of
# everything, then the whole suite).
set -euo pipefail

MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
CHROOT_BASE="${CHROOT_BASE:-/work/chroot-fresh}"
KEEP_CHROOT="${KEEP_CHROOT:-0}"
INCLUDE="ca-certificates,gcc,libc6-dev,git"
REPO="$(cd "$(dirname "$0")/.." && pwd)"

if [ "$(id -u)" != 0 ]; then
    echo "error: run as root (debootstrap, mount and chroot need it)" >&2
    exit 1
fi

ROOT=""
MOUNTS=()     # mount points, in the order they were mounted
SUMMARY=()    # one line per timed step

log() { echo "=== $*"; }

# Mount points at or under $ROOT (none once everything is unmounted).
mounts_under() {
    [ -n "$ROOT" ] || return 0
    findmnt -rn -o TARGET | awk -v root="$ROOT" \
        'substr($0, 1, length(root)) == root && (length($0) == length(root) || substr($0, length(root) + 1, 1) == "/")'
}

# Processes whose root directory is the chroot.
chroot_pids() {
    local p
    for p in /proc/[0-9]*; do
        if [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ]; then
            echo "${p#/proc/}"
        fi
    done
}

cleanup() {
    local rc=$?
    set +e
    if [ ${#SUMMARY[@]} -gt 0 ]; then
        log "summary"
        printf '%s\n' "${SUMMARY[@]}"
    fi
    [ -n "$ROOT" ] || exit "$rc"
    case "$ROOT" in
        "$CHROOT_BASE"/bookworm.?*) ;;
        *) echo "error: unexpected chroot path $ROOT; not touching it" >&2; exit 1 ;;
    esac
    local pids
    pids="$(chroot_pids | tr '\n' ' ')"
    if [ -n "${pids// }" ]; then
        log "processes left in the chroot: $pids"
        for pid in $pids; do
            ps -o pid=,args= -p "$pid"
        done
        for pid in $pids; do kill -TERM "$pid" 2>/dev/null; done
        sleep 2
        for pid in $(chroot_pids); do kill -KILL "$pid" 2>/dev/null; done
        sleep 1
    fi
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        umount -R "${MOUNTS[$i]}" 2>/dev/null || umount -R -l "${MOUNTS[$i]}"
    done
    local left
    left="$(mounts_under)"
    if [ -n "$left" ]; then
        echo "error: still mounted, NOT removing $ROOT:" >&2
        echo "$left" >&2
        exit 1
    fi
    if [ "$KEEP_CHROOT" = 1 ]; then
        log "kept the chroot at $ROOT (nothing mounted in it)"
    else
        rm -rf "$ROOT"
        rmdir "$CHROOT_BASE" 2>/dev/null
        log "removed $ROOT"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs "$@" as a timed step named $1 and records its time and outcome.
step() {
    local name="$1" started rc
    shift
    log "$name"
    started=$(date +%s)
    if "$@"; then rc=0; else rc=$?; fi
    local outcome="ok"
    [ "$rc" = 0 ] || outcome="FAILED (exit code $rc)"
    SUMMARY+=("$(printf '%-48s %5d s  %s' "$name" $(($(date +%s) - started)) "$outcome")")
    return "$rc"
}

# Runs a bash command line in the chroot as root, with a clean environment.
in_chroot() {
    chroot "$ROOT" /usr/bin/env -i \
        HOME=/root \
        PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        TERM="${TERM:-dumb}" \
        /bin/bash -c "$1"
}

bind_mount() {  # bind_mount SOURCE TARGET [ro]
    mkdir -p "$2"
    if [ "$1" = /dev ]; then
        mount --rbind "$1" "$2"
        MOUNTS+=("$2")
        mount --make-rslave "$2"
    else
        mount --bind "$1" "$2"
        MOUNTS+=("$2")
    fi
    if [ "${3:-}" = ro ]; then
        mount -o remount,bind,ro "$2"
    fi
}

package_state() {
    in_chroot 'for p in redis-server redis-tools openssl; do
        v=$(dpkg-query -W -f="\${Status} \${Version}" "$p" 2>/dev/null | sed -n "s/^install ok installed //p")
        echo "  $p: ${v:-not installed}"
    done'
}

if ! command -v debootstrap >/dev/null 2>&1; then
    step "install debootstrap on the host" bash -c \
        'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap'
fi

COMMIT="$(git -C "$REPO" rev-parse HEAD)"
if [ -n "$(git -C "$REPO" status --porcelain)" ]; then
    echo "note: $REPO has uncommitted changes; checking the commit $COMMIT only"
fi

mkdir -p "$CHROOT_BASE"
ROOT="$(mktemp -d "$CHROOT_BASE/bookworm.XXXXXX")"
chmod 755 "$ROOT"
log "chroot: $ROOT, repository: $REPO at $COMMIT"

step "debootstrap bookworm (minbase + $INCLUDE)" \
    debootstrap --variant=minbase --include="$INCLUDE" bookworm "$ROOT" "$MIRROR"

# Apt sources as the Debian installer writes them.
rm -f "$ROOT/etc/apt/sources.list"
cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
printf '#!/bin/sh\n# chroot: package scripts start no daemons\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
grep -qw localhost "$ROOT/etc/hosts" 2>/dev/null || echo "127.0.0.1 localhost" >>"$ROOT/etc/hosts"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"

bind_mount /proc "$ROOT/proc"
bind_mount /dev "$ROOT/dev"
bind_mount /sys "$ROOT/sys"
bind_mount /root/.rustup "$ROOT/root/.rustup" ro
bind_mount /root/.cargo/bin "$ROOT/root/.cargo/bin" ro

# The network's CAs, as the host has them (see the header).
shopt -s nullglob
local_cas=(/usr/local/share/ca-certificates/*.crt)
shopt -u nullglob
if [ ${#local_cas[@]} -gt 0 ]; then
    log "copying the host's local CA certificates: ${local_cas[*]}"
    cp "${local_cas[@]}" "$ROOT/usr/local/share/ca-certificates/"
    in_chroot 'update-ca-certificates >/dev/null'
fi

git clone -q --no-checkout "$REPO" "$ROOT/root/leasehold"
git -C "$ROOT/root/leasehold" -c advice.detachedHead=false checkout -q --detach "$COMMIT"
# The Redisson 4.7.0 jar the interop run takes from ../shared/redisson/
# beside the repository (Java and the Debian jars it runs on are left for
# xtask to install).
if [ -d "$REPO/../shared/redisson" ]; then
    mkdir -p "$ROOT/root/shared"
    cp -r "$REPO/../shared/redisson" "$ROOT/root/shared/"
fi

log "the machine"
in_chroot '. /etc/os-release; echo "  $PRETTY_NAME"; cargo --version; rustc --version; gcc --version | head -1; git --version
    echo "  dpkg packages installed: $(dpkg-query -W -f="\${Status}\n" | grep -c "install ok installed")"'
if in_chroot 'command -v redis-server || dpkg-query -W redis-server 2>/dev/null'; then
    echo "error: redis-server is already installed in the chroot" >&2
    exit 1
fi
echo "  redis-server: not installed (as it should be)"
log "packages before"
package_state

step "cargo xtask demo" in_chroot 'cd /root/leasehold && cargo xtask demo'
log "packages after the demo"
package_state

step "cargo xtask test" in_chroot 'cd /root/leasehold && cargo xtask test'
log "packages after the tests"
package_state

log "done: both commands passed on a fresh Debian bookworm"
