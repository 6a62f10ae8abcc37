#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Regenerate configure and Makefile.in from a git checkout.
set -e
cd "$(dirname "$0")"
mkdir -p config
autoreconf -fi
