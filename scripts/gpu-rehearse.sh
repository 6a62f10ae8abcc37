#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# gpu-rehearse.sh: scripts/gpu-check.sh in a bare Debian 12 root that holds
# only the carried prefix, the CUDA toolkit and what the GPU machine has of
# its own (gcc/g++ for nvcc, python3), to prove the carry and the script's
# logic before device time is spent. Its results are never GPU results.
# Root, here (Debian 12, the archive reachable, autotools installed).
#
#   sh scripts/gpu-rehearse.sh [plain|emulate|both]     (default: both)
#     plain    no GPU: the build with nvcc, the GPU tests skip (77), the
#              trainer and bench steps say SKIP
#     emulate  GPU_CHECK_EMULATE=1: --with-cuda=emulate, every GPU step on the
#              host emulation (DDPC_EMU_DEVICES=4)
# BARE (default /work/bare) is made once with debootstrap --variant=minbase
# and kept; gcc, g++, libc6-dev and python3-minimal are added to it (the GPU
# machine has a compiler and python3; nothing else there is Debian's). Each
# run copies the working tree (git ls-files: tracked and untracked, not
# ignored, as the device tool does), generates configure etc. with
# autoreconf -fi in the copy (never in this tree), copies gpu-carry/ (made by
# gpu-check.sh --prepare when missing), mounts /proc, /sys, /dev, a tmpfs on
# /dev/shm and the toolkit read-only, runs the script with
# GPU_CHECK_CARRY_STRICT=1 (a library from the bare root's own /usr/lib
# fails the carry step), and unmounts everything it mounted.
# JOBS (default 2) is make -j; SCALE (default 8) multiplies the script's step
# limits and budget (2 shared cores, not 16). Results: $BARE/out-MODE/
# (summary.txt, the tarball) and the wall time of each run.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
BARE=${BARE:-/work/bare}
MODE=${1:-both}
JOBS=${JOBS:-2}
SCALE=${SCALE:-8}
case $MODE in plain) modes=plain ;; emulate) modes=emulate ;; both) modes="plain emulate" ;;
    *) echo "usage: gpu-rehearse.sh [plain|emulate|both]" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "gpu-rehearse: needs root (debootstrap, mount, chroot)" >&2; exit 1; }
MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CUDA_REAL=$(readlink -f /usr/local/cuda)
[ -x "$CUDA_REAL/bin/nvcc" ] || { echo "gpu-rehearse: no CUDA toolkit at /usr/local/cuda" >&2; exit 1; }

mounted=
cleanup() {
    for m in $mounted; do umount "$m" || umount -l "$m"; done
    mounted=
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mnt() { # mnt TARGET MOUNT-ARGS...: mount, remembered for cleanup (last first)
    t=$1; shift
    mkdir -p "$t"
    mount "$@" "$t"
    mounted="$t $mounted"
}

# ------------------------------------------------------------------ the bare root, once
if [ ! -x "$BARE/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
    debootstrap --variant=minbase bookworm "$BARE" "$MIRROR"
fi
mnt "$BARE/proc" -t proc proc
mnt "$BARE/sys" -t sysfs sysfs
mnt "$BARE/dev" --bind /dev
mnt "$BARE/dev/shm" -t tmpfs -o size=4g tmpfs
if [ ! -f "$BARE/.gpu-rehearse-system" ]; then
    chroot "$BARE" apt-get update -q
    chroot "$BARE" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        gcc g++ libc6-dev python3-minimal
    chroot "$BARE" apt-get clean
    : >"$BARE/.gpu-rehearse-system"
fi
# the toolkit as on the GPU machine: /usr/local/cuda (a link here to cuda-13.0)
mnt "$BARE$CUDA_REAL" --bind -o ro "$CUDA_REAL"
mount -o remount,bind,ro "$BARE$CUDA_REAL"
[ "$CUDA_REAL" = /usr/local/cuda ] || ln -sfn "$CUDA_REAL" "$BARE/usr/local/cuda"

# ------------------------------------------------------------------ the tree, as the device tool carries it
[ -f "$here/gpu-carry/prefix.tar.xz" ] || sh "$here/scripts/gpu-check.sh" --prepare
T=$BARE/work/ddpc
rm -rf "$T" && mkdir -p "$T"
(cd "$here" && git ls-files -co --exclude-standard | while read -r f; do [ -e "$f" ] && echo "$f"; done |
    tar -cf - -T -) | tar -C "$T" -xf -
t0=$(date +%s)
(cd "$T" && autoreconf -fi >autoreconf.log 2>&1) || { cat "$T/autoreconf.log"; exit 1; }
rm -rf "$T/autom4te.cache" "$T/autoreconf.log"
echo "gpu-rehearse: tree copied, autoreconf -fi in the copy: $(($(date +%s) - t0))s"
cp -a "$here/gpu-carry" "$T/"
echo "gpu-rehearse: carried: gpu-carry $(du -sm "$T/gpu-carry" | cut -f1) MiB, generated files $(cd "$T" && du -scm configure Makefile.in config.h.in aclocal.m4 config | tail -1 | cut -f1) MiB"

# ------------------------------------------------------------------ the runs
# each mode: the default tier, then --long (which reuses that build)
for m in $modes; do
    rm -rf "$BARE/out-$m"
    emu=
    [ $m = emulate ] && emu=GPU_CHECK_EMULATE=1
    for tier in "" --long; do
        t0=$(date +%s)
        set +e
        # shellcheck disable=SC2086
        env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            OUT=/out-$m GPU_CHECK_WORK=/tmp/ddpc-gpu-check-$m GPU_CHECK_JOBS="$JOBS" GPU_CHECK_TIME_SCALE="$SCALE" \
            GPU_CHECK_CARRY_STRICT=1 $emu chroot "$BARE" sh /work/ddpc/scripts/gpu-check.sh $tier
        rc=$?
        set -e
        echo "gpu-rehearse: $m ${tier:-default}: exit $rc in $(($(date +%s) - t0))s; results in $BARE/out-$m/"
    done
done
