#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info`; for CI and fresh Debian machines.
#
#   - nothing to do when `docker info` already works;
#   - installs docker.io (and debootstrap, for build_image.sh) with apt-get when dockerd
#     is missing (needs root; apt-get update first);
#   - starts dockerd in the background, detached from this shell (it outlives the test
#     run: it is the machine's engine), its log in $MMELOCAL_DOCKERD_LOG
#     (default /tmp/mmelocal-dockerd.log), and waits up to 60 s for `docker info`.
# Exits non-zero with the reason (and the daemon log's tail) when the engine cannot start.
set -euo pipefail

log_file="${MMELOCAL_DOCKERD_LOG:-/tmp/mmelocal-dockerd.log}"
say() { echo "[ensure_engine] $(date +%H:%M:%S) $*" >&2; }
die() { echo "[ensure_engine] ERROR: $*" >&2; exit 1; }

if command -v docker > /dev/null && docker info > /dev/null 2>&1; then
    say "Docker engine already running"
    exit 0
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo > /dev/null || die "not root and no sudo: start a Docker engine by hand"
    sudo="sudo -n"
fi

need=()
command -v dockerd > /dev/null || need+=(docker.io)
command -v debootstrap > /dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
    command -v apt-get > /dev/null || die "no dockerd and no apt-get: install Docker by hand"
    say "apt-get install ${need[*]}"
    start=$(date +%s)
    $sudo apt-get update -qq > /tmp/mmelocal-apt.log 2>&1 \
        || die "apt-get update failed: $(tail -3 /tmp/mmelocal-apt.log)"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
        "${need[@]}" >> /tmp/mmelocal-apt.log 2>&1 \
        || die "apt-get install ${need[*]} failed: $(tail -3 /tmp/mmelocal-apt.log)"
    say "installed in $(( $(date +%s) - start ))s"
fi
command -v docker > /dev/null || die "docker CLI missing after installing docker.io"

# a live dockerd (a killed one can linger as a zombie, which must not count)
dockerd_alive() {
    local pid
    for pid in $(pgrep -x dockerd); do
        [ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2> /dev/null)" != Z ] && return 0
    done
    return 1
}
if ! dockerd_alive; then
    say "starting dockerd (log: $log_file)"
    # setsid + nohup: the daemon must not die with the shell or the test session
    $sudo setsid nohup dockerd > "$log_file" 2>&1 < /dev/null &
fi
for _ in $(seq 1 120); do
    if docker info > /dev/null 2>&1; then
        say "Docker engine ready"
        exit 0
    fi
    sleep 0.5
done
die "dockerd did not answer within 60 s; last lines of $log_file:
$(tail -20 "$log_file" 2> /dev/null)"
