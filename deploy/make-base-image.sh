#!/usr/bin/env bash
# Make a local Python base image from Debian's own packages, for machines that cannot pull
# python:3.12-slim (no registry reachable, only a Debian mirror):
#
#   deploy/make-base-image.sh                       # -> localhost/debian-python:bookworm
#   docker build --build-arg PYTHON_IMAGE=localhost/debian-python:bookworm -t crossfeed .
#   (podman: podman build --format docker --build-arg PYTHON_IMAGE=localhost/debian-python:bookworm -t crossfeed .)
#
# It bootstraps a minimal Debian (mmdebstrap, else debootstrap; as root) with python3 and
# python3-venv (the Dockerfile's build stage makes a venv), drops docs, man pages, locales and apt
# lists, and imports the tree as an image with `ENGINE import`. The interpreter is Debian's
# /usr/bin/python3 (3.11 on bookworm); there is no `python` alias, which the Dockerfile does not need.
#
# Environment (all optional):
#   ENGINE=docker|podman      default: docker if `docker info` answers, else podman
#   ENGINE_FLAGS="..."        global flags for the engine, e.g. "--storage-driver vfs" (podman)
#   IMAGE=name:tag            default localhost/debian-python:bookworm
#   SUITE=bookworm            Debian suite
#   MIRROR=URL                default http://deb.debian.org/debian
#   BOOTSTRAP=mmdebstrap|debootstrap   default: mmdebstrap if installed, else debootstrap
#   FORCE=1                   rebuild even if IMAGE already exists
set -euo pipefail

IMAGE=${IMAGE:-localhost/debian-python:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv

say() { printf 'make-base-image: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

if [[ -z ${ENGINE:-} ]]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null 2>&1; then
        ENGINE=podman
    else
        die "no container engine: neither a running docker nor podman"
    fi
fi
# shellcheck disable=SC2206  # ENGINE_FLAGS is a list of words on purpose
engine=("$ENGINE" ${ENGINE_FLAGS:-})

if [[ -z ${FORCE:-} ]] && "${engine[@]}" image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE already exists (FORCE=1 to rebuild)"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "bootstrapping Debian needs root (or run mmdebstrap --mode=unshare yourself)"

work=$(mktemp -d "${TMPDIR:-/tmp}/crossfeed-base.XXXXXX")
root=$work/root
cleanup() {  # a failed bootstrap may leave /proc or /sys mounted in the tree: never delete through them
    local m
    awk -v r="$root/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
        umount -l "$m" || true
    done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

if [[ -z ${BOOTSTRAP:-} ]]; then
    BOOTSTRAP=debootstrap
    command -v mmdebstrap >/dev/null 2>&1 && BOOTSTRAP=mmdebstrap
fi
command -v "$BOOTSTRAP" >/dev/null 2>&1 || die "$BOOTSTRAP is not installed (apt-get install mmdebstrap)"
if [[ $BOOTSTRAP == mmdebstrap ]]; then
    say "mmdebstrap $SUITE ($PACKAGES) from $MIRROR"
    # The merged-usr hook sets /usr up the way debootstrap does; without it apt resolves
    # usr-is-merged to the usrmerge package, which brings perl (~50 MB) into the image.
    hooks=()
    [[ -d /usr/share/mmdebstrap/hooks/merged-usr ]] && hooks=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
    mmdebstrap --variant=minbase --include="$PACKAGES" "${hooks[@]}" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        "$SUITE" "$root" "$MIRROR" >&2
elif [[ $BOOTSTRAP == debootstrap ]]; then
    say "debootstrap $SUITE ($PACKAGES) from $MIRROR"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >&2
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/usr/share/info/*
else
    die "BOOTSTRAP must be mmdebstrap or debootstrap, not $BOOTSTRAP"
fi

# What an image does not need: package lists and caches, logs, machine identity.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
: >"$root/etc/machine-id"
[[ -x $root/usr/bin/python3 ]] || die "no /usr/bin/python3 in the bootstrapped tree"
"$root/usr/bin/python3" -c 'import ensurepip, venv' 2>/dev/null \
    || chroot "$root" /usr/bin/python3 -c 'import ensurepip, venv' \
    || die "python3-venv is not usable in the bootstrapped tree"

say "importing into $ENGINE as $IMAGE"
tar --numeric-owner --xattrs -C "$root" -c . \
    | "${engine[@]}" import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/usr/bin/python3"]' \
        - "$IMAGE" >&2
say "done: $("${engine[@]}" image inspect --format '{{.Size}}' "$IMAGE") bytes, $IMAGE"
