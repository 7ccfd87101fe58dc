#!/usr/bin/env bash
# Installs the Debian packages Roost's tests, benchmarks and `roost up` use, only
# those missing (idempotent; `scripts/test.sh` runs it first):
#   redis-server   each site's store in the escrow middleware tests, the peer in
#                  `roost bench resp` and `roost bench escrow`
#   redis-tools    redis-cli, a client in the RESP front door's tests
#   python3-redis  redis-py, a client in the RESP front door's tests
#   etcd-server    membership of the multi-process cluster tests (`roost up` uses
#                  it when present, else its built-in membership)
#   fonts-dejavu-core  the font of the benchmark plots
#   postgresql     the peer in `roost bench smallbank --postgres` (initdb, pg_ctl,
#                  pgbench; the benchmark starts a server of its own)
set -euo pipefail

packages=(fonts-dejavu-core redis-tools redis-server python3-redis etcd-server postgresql)
# Installed means dpkg's "install ok installed": `dpkg -s` also succeeds for a
# package removed with its configuration files left behind.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -qx 'install ok installed'; }
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: every package is installed (${packages[*]})"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "install-deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
    exit 1
  }
  SUDO="sudo"
fi
$SUDO apt-get update -qq
# Installing a server package must not start its service: the tests start their
# own redis-server, etcd and PostgreSQL processes on their own ports.
policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
fi
status=0
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" || status=$?
[ -n "$policy" ] && $SUDO rm -f "$policy"
if [ "$status" -ne 0 ]; then
  echo "install-deps: apt-get install ${missing[*]} failed (exit $status)" >&2
  exit "$status"
fi
for p in "${missing[@]}"; do
  installed "$p" || { echo "install-deps: $p still missing after apt-get" >&2; exit 1; }
done
echo "install-deps: installed ${missing[*]}"
