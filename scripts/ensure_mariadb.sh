#!/bin/sh
# Installs Debian's MariaDB server (the binlog reader's embedded server; `hubstream stack up` starts
# its own instance with a row-based binlog) when mariadbd is absent. Idempotent.
set -eu
if [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null
test -x /usr/sbin/mariadbd
