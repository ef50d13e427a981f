#!/usr/bin/env bash
# What make test needs besides Go, on Debian: a real etcd (the replicas' tests), a real
# ZooKeeper (the ZooKeeper source's), a C compiler (go test -race needs cgo), and Chromium (the
# status page's browser test). As root, the missing ones are installed with apt-get; otherwise
# one line says which command to run, and make test stops before running anything.
set -euo pipefail

missing=()
command -v etcd >/dev/null 2>&1 || [ -n "${MCPBRIDGE_ETCD:-}" ] || missing+=(etcd-server)
[ -e /usr/share/java/zookeeper.jar ] || [ -n "${MCPBRIDGE_ZOOKEEPER_CLASSPATH:-}" ] || missing+=(zookeeper)
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || missing+=(gcc)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
  && ! command -v google-chrome >/dev/null 2>&1; then
  missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make test: installing ${missing[*]} (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  exit 0
fi
echo "make test needs ${missing[*]}: run  sudo apt-get install -y ${missing[*]}  (Debian/Ubuntu), then make test again" >&2
exit 1
