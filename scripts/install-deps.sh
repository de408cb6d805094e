#!/usr/bin/env bash
# Installs Cohort's build and test dependencies from Debian's packages. Idempotent: a
# machine that already has everything runs no apt-get at all.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache mold   # mold links (CMakeLists.txt)
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
  nlohmann-json3-dev libsqlite3-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev
  libopenblas-dev libpcre2-dev   # the training engine: sgemm; GPT-2 BPE pre-tokenizer regex
  procps iproute2 curl python3
  clang-16   # checks the head's and the agent's locking (-Wthread-safety); GCC builds
  libclang-rt-16-dev libomp-16-dev   # the fuzz targets (libFuzzer, sanitizers; OpenMP for the engine)
  chromium   # the dashboard's browser test (headless, driven over the DevTools protocol)
  prometheus      # promtool check metrics and a real scrape in the observability tests
  python3-torch   # the PyTorch DDP example and its test (Debian's CPU build)
  podman runc catatonit busybox-static   # container jobs and their test (scripts/setup-podman.sh)
  zsh   # the zsh completion script's test runs it in a real zsh
)
# Docker container jobs' test (tests/integration/docker_test.cc starts a dockerd of its own;
# ~8 s to download and install on the 2-core VM). Only where no Docker is installed: Debian's
# docker.io conflicts with Docker's own docker-ce and containerd.io packages, which apt would
# remove. The package's service is not started where policy-rc.d forbids it (containers).
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The official OpenAI SDK for the gateway's client test (npm, pinned; see the script).
sdk() { bash "$(dirname "$0")/install-openai-sdk.sh"; }

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  sdk
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
sdk
