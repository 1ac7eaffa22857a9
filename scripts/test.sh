#!/usr/bin/env bash
# The test command (README) and what CI runs (.ci/run): install system + Python packages, start an isolated Docker
# daemon, build the offline task images, run the whole pytest suite (Docker tests required, not skipped), stop the
# daemon. Extra arguments go to pytest. Needs root for apt-get and dockerd.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in bwrap:bubblewrap dockerd:docker.io debootstrap:debootstrap patch:patch openssl:openssl mkfs.ext4:e2fsprogs \
    losetup:mount; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if ((${#need[@]})); then
  echo "== apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "== pip install (scripts/install.sh --test)"
bash scripts/install.sh --test

echo "== start an isolated dockerd"
eval "$(bash scripts/dockerd.sh start)"
export DOCKER_HOST
trap 'bash scripts/dockerd.sh stop >/dev/null 2>&1 || true' EXIT

echo "== build the offline images (cached across runs)"
nexus-agent env build

echo "== pytest"
export NEXUS_REQUIRE_DOCKER=1
python3 -m pytest -q "$@"
