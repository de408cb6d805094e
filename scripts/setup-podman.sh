#!/usr/bin/env bash
# Makes Podman able to run Cohort's container jobs on this machine (called by
# scripts/install-deps.sh; idempotent). It tries a container made from Debian's
# busybox-static (no registry) and, only if that fails, writes a drop-in for what some
# hosts need, then tries again:
#   - cgroups in hybrid mode (v1 controllers beside a v2 mount), which crun refuses:
#     the runc runtime, which accepts them;
#   - root without CAP_SYS_RESOURCE (a container or microVM sandbox), which cannot raise
#     the default ulimits Podman asks for (nofile 1048576): this machine's own hard limits
#     (nproc at most 32768, the limit Podman sets for itself before it starts the runtime).
# Exits 0 either way: the container tests skip, saying why, where Podman still cannot run.
set -uo pipefail

dropin=/etc/containers/containers.conf.d/50-cohort.conf
image=localhost/cohort-podman-probe:latest
command -v podman >/dev/null && [ -x /bin/busybox ] || { echo "setup-podman: podman or busybox-static missing"; exit 0; }

root=$(mktemp -d)
trap 'rm -rf "$root"; podman rmi --force "$image" >/dev/null 2>&1' EXIT
mkdir -p "$root/bin" && cp /bin/busybox "$root/bin/" && ln -s busybox "$root/bin/true"
tar -C "$root" -c . | podman import - "$image" >/dev/null 2>&1 || { echo "setup-podman: podman import failed"; exit 0; }

probe() { podman run --rm --network=host "$image" /bin/true >/dev/null 2>"$root/err"; }

if probe; then
  echo "setup-podman: podman runs containers"
  exit 0
fi
echo "setup-podman: podman cannot run a container as configured: $(tail -1 "$root/err")"
mkdir -p "$(dirname "$dropin")"
{
  echo "# Written by Cohort's scripts/setup-podman.sh: what this host needs to run containers."
  echo "[containers]"
  echo "default_ulimits = [\"nofile=$(ulimit -Hn):$(ulimit -Hn)\", \"nproc=$(( $(ulimit -Hu) < 32768 ? $(ulimit -Hu) : 32768 )):$(( $(ulimit -Hu) < 32768 ? $(ulimit -Hu) : 32768 ))\"]"
  if [ -d /sys/fs/cgroup/unified ] && command -v runc >/dev/null; then
    echo "[engine]"
    echo "runtime = \"runc\""
  fi
} >"$dropin"
if probe; then
  echo "setup-podman: podman runs containers with $dropin"
else
  echo "setup-podman: podman still cannot run a container ($(tail -1 "$root/err")); removing $dropin"
  rm -f "$dropin"
fi
exit 0
