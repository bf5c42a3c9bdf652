#!/usr/bin/env bash
# Build the local Triton test image without pulling anything from a registry.
#
#   1. base image: a Debian root filesystem made with debootstrap from Debian's packages
#      (minbase + libpython3.11 + python3-numpy), trimmed, kept as a tarball in the cache
#      and turned into an image with `docker import`;
#   2. test image: `docker build` of ./Dockerfile on that base, the build context holding
#      nvidia-pytriton's tritonserver (bin, python backend, stubs) and its bundled libs.
#
# Both steps are skipped when their result already exists (image tags carry a hash of
# their inputs), so a second run on the same machine takes about a second.
# Prints the test image's tag as the last line of stdout.
#
# Environment: PYTHON (interpreter with nvidia-pytriton; default: the repo's .venv),
# MMELOCAL_CACHE_DIR (default ~/.cache/mmelocal), DEBIAN_MIRROR, MMELOCAL_TEST_IMAGE
# (tag to build, default derived from the inputs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../../.." && pwd)"
PYTHON="${PYTHON:-$repo_root/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
cache="${MMELOCAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mmelocal}/docker"
suite=bookworm
packages=libpython3.11,python3-numpy
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { echo "[build_image] $(date +%H:%M:%S) $*" >&2; }
die() { echo "[build_image] ERROR: $*" >&2; exit 1; }
# exit 3: a prerequisite is missing (the tests skip outside CI instead of failing)
missing() { echo "[build_image] MISSING: $*" >&2; exit 3; }

command -v docker > /dev/null || missing "docker CLI not found: run tests/runtime/docker_image/ensure_engine.sh"
docker info > /dev/null 2>&1 || missing "Docker engine not reachable: run tests/runtime/docker_image/ensure_engine.sh"

# --- where nvidia-pytriton's tritonserver is ---------------------------------------
read -r pytriton_dir pytriton_version < <("$PYTHON" - <<'EOF'
import importlib.metadata, os, pytriton
print(os.path.dirname(pytriton.__file__), importlib.metadata.version("nvidia-pytriton"))
EOF
) || missing "nvidia-pytriton is not importable with $PYTHON: pip install 'mmelocal[triton]'"
server_dir="$pytriton_dir/tritonserver"
libs_dir="$(dirname "$pytriton_dir")/nvidia_pytriton.libs"
[ -x "$server_dir/bin/tritonserver" ] || die "no tritonserver in $server_dir"
[ -d "$libs_dir" ] || die "no nvidia_pytriton.libs next to $pytriton_dir"

hash_of() { sha256sum | cut -c1-12; }
base_key="$(printf '%s|%s|v1' "$suite" "$packages" | hash_of)"
base_tag="mmelocal-test/debian-python:$suite-$base_key"
image_key="$( (cat "$here/Dockerfile"; echo "$base_tag|$pytriton_version") | hash_of)"
image_tag="${MMELOCAL_TEST_IMAGE:-mmelocal-test/tritonserver:$pytriton_version-$image_key}"

if docker image inspect "$image_tag" > /dev/null 2>&1; then
    log "image $image_tag already built"
    echo "$image_tag"
    exit 0
fi

# --- base image: Debian root filesystem ---------------------------------------------
if ! docker image inspect "$base_tag" > /dev/null 2>&1; then
    mkdir -p "$cache"
    tarball="$cache/rootfs-$suite-$base_key.tar"
    if [ ! -s "$tarball" ]; then
        command -v debootstrap > /dev/null \
            || missing "debootstrap not found: apt-get install -y debootstrap (or run ensure_engine.sh)"
        [ "$(id -u)" = 0 ] || missing "debootstrap needs root to make the base root filesystem"
        work="$(mktemp -d "$cache/.rootfs-XXXXXX")"
        trap 'rm -rf "$work"' EXIT
        log "debootstrap $suite (minbase + $packages) from $mirror"
        debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" \
            > "$cache/debootstrap.log" 2>&1 \
            || die "debootstrap failed, see $cache/debootstrap.log: $(tail -3 "$cache/debootstrap.log")"
        rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
            "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* \
            "$work"/rootfs/usr/share/locale/*
        tar -C "$work/rootfs" --numeric-owner -cf "$work/rootfs.tar" .
        mv "$work/rootfs.tar" "$tarball"
        rm -rf "$work"
        trap - EXIT
        log "root filesystem cached in $tarball ($(du -h "$tarball" | cut -f1))"
    else
        log "using cached root filesystem $tarball"
    fi
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$base_tag" > /dev/null
    log "imported $base_tag"
fi

# --- test image ----------------------------------------------------------------------
context="$(mktemp -d "${TMPDIR:-/tmp}/mmelocal-image-XXXXXX")"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/tritonserver"
# hard links where the file system allows it (no copy of ~150 MB), else a plain copy
copy() { cp -al "$1" "$2" 2> /dev/null || cp -a "$1" "$2"; }
copy "$server_dir/bin" "$context/tritonserver/bin"
copy "$server_dir/backends" "$context/tritonserver/backends"
copy "$server_dir/python_backend_stubs" "$context/tritonserver/python_backend_stubs"
[ -d "$server_dir/caches" ] && copy "$server_dir/caches" "$context/tritonserver/caches"
copy "$libs_dir" "$context/tritonserver/lib"
find "$context" -name __pycache__ -prune -exec rm -rf {} +
cp "$here/Dockerfile" "$context/Dockerfile"
log "docker build $image_tag"
DOCKER_BUILDKIT=0 docker build --quiet \
    --build-arg "BASE_IMAGE=$base_tag" \
    --label "mmelocal.test-image=1" \
    --label "mmelocal.pytriton-version=$pytriton_version" \
    -t "$image_tag" "$context" > /dev/null
log "built $image_tag"
# older builds of the test image (other input hashes) are dead weight: drop them
if [ -z "${MMELOCAL_TEST_IMAGE:-}" ]; then
    docker images --format '{{.Repository}}:{{.Tag}}' mmelocal-test/tritonserver \
        | grep -vxF "$image_tag" | xargs -r docker rmi > /dev/null 2>&1 || true
fi
echo "$image_tag"
