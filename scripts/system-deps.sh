# shellcheck shell=bash
# Debian packages the simulator side needs (sourced; idempotent):
# plotters renders text through fontconfig + a TrueType font; the
# sharded-study test (tests/cli/slurm.rs) starts a real single-host Slurm.
#     . scripts/system-deps.sh
__cephalo_system_deps() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    pkg-config --exists fontconfig 2>/dev/null || missing+=(libfontconfig1-dev)
    fc-list 2>/dev/null | grep -qi dejavu || missing+=(fonts-dejavu-core)
    [ -x /usr/sbin/slurmctld ] || missing+=(slurmctld)
    [ -x /usr/sbin/slurmd ] || missing+=(slurmd)
    command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
    [ "${#missing[@]}" -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
    echo "system-deps: apt-get install ${missing[*]}" >&2
    $sudo apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
__cephalo_system_deps
unset -f __cephalo_system_deps
