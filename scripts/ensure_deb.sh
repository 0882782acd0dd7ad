#!/bin/sh
# Usage: ensure_deb.sh PROGRAM PACKAGE...
# Installs Debian's PACKAGEs when PROGRAM (an absolute path) is absent. Idempotent: does nothing
# when it is there. Used by `make install` for chromium (the dashboard's browser test), stunnel4 (TLS tests) and
# mariadb-server (the binlog reader's own server).
set -eu
program="$1"
shift
if [ -x "$program" ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
test -x "$program"
