#!/bin/sh
# Install the Debian tools the gpulab test lab needs on the controller (CI calls this).
# Idempotent: apt-get runs only when something is missing. Needs root.
# slurm-client and munge: the Slurm commands of the controller machine and its own munged, for the lab's
# real Slurm (tests/testlab/slurm.py; the hosts get slurmd, slurmctld and munge in a layer of their own).
# Python packages the lab code uses come from the project's extras (controller + test):
# pyyaml, jinja2, jsonschema, ansible-runner, ansible-core, pytest.
set -eu
# command -> Debian package
need="debootstrap:debootstrap dpkg-deb:dpkg dpkg-scanpackages:dpkg-dev apt-ftparchive:apt-utils
zstd:zstd ssh:openssh-client ssh-keygen:openssh-client ssh-keyscan:openssh-client ip:iproute2
unshare:util-linux nsenter:util-linux tar:tar cc:gcc sbatch:slurm-client munged:munge"
missing=""
for pair in $need; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || missing="$missing $pkg"
done
# debootstrap checks the Release signature with Debian's keyring
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing="$missing debian-archive-keyring"
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install:$missing" >&2
    exit 1
  fi
  missing=$(printf '%s\n' $missing | sort -u | tr '\n' ' ')
  echo "install-deps: installing $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing
else
  echo "install-deps: all test lab tools present"
fi
