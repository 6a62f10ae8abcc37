#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bootstrap.sh: the quick start on a fresh Debian 12 machine, as root.
# Installs the Debian packages ddpc needs, builds it in build/, and runs the
# main job (2 ranks). `./bootstrap.sh --deps-only` only installs packages;
# `--no-run` installs and builds.
set -eu
cd "$(dirname "$0")"
mode=${1:-all}
PKGS="build-essential autoconf automake libtool pkg-config mpich libmpich-dev
 libhdf5-dev hdf5-tools libpmix-dev check zlib1g-dev libblis-dev libopenblas-dev
 slurm-wlm munge iproute2 dataset-fashion-mnist python3 python3-h5py python3-numpy
 python3-matplotlib
 lmod groff-base man-db tcl"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || { echo "bootstrap.sh: run as root to install:$missing" >&2; exit 1; }
    echo "bootstrap.sh: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
fi
# Environment Modules conflicts with Lmod as a Debian package: its pure-Tcl
# modulecmd is unpacked (not installed) where tests/modulefile.sh finds it,
# to load the Tcl modulefile with the real thing.
EMDIR=/usr/local/lib/ddpc-ci/environment-modules
if [ ! -f "$EMDIR/usr/lib/x86_64-linux-gnu/modulecmd.tcl" ] && [ "$(id -u)" = 0 ]; then
    emtmp=$(mktemp -d)
    if (cd "$emtmp" && apt-get download -q environment-modules >/dev/null 2>&1) && mkdir -p "$EMDIR" &&
        dpkg -x "$emtmp"/environment-modules_*.deb "$EMDIR"; then
        echo "bootstrap.sh: environment-modules unpacked in $EMDIR (for the tests)"
    else
        echo "bootstrap.sh: warning: could not fetch environment-modules; its modulefile test will skip" >&2
    fi
    rm -rf "$emtmp"
fi
[ "$mode" = --deps-only ] && exit 0

[ -x configure ] || ./autogen.sh
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"
[ "$mode" = --no-run ] && exit 0

# The main job: one epoch on Fashion-MNIST over 2 ranks; checkpoints go to
# build/checkpoints (--resume never: train again even if a previous run is there).
echo "bootstrap.sh: main job: mpiexec.mpich -n 2 ./trainer --epochs 1 (in build/)"
timeout 600 mpiexec.mpich -n 2 ./trainer --epochs 1 --ckpt-dir checkpoints --resume never
echo "bootstrap.sh: done; the checkpoint is in $(pwd)/checkpoints, the options in ./trainer --help"
