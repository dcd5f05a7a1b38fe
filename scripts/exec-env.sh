# shellcheck shell=bash
# Set up and export what `cargo build --features exec` (tch + MPI) needs.
#
# Usage (sourced, idempotent; safe to source many times):
#     . scripts/exec-env.sh
#
# What it does, each step only when something is missing:
#   1. libtorch 2.11.0 (the version tch =0.24.0 is paired with), in order:
#      a. an existing $LIBTORCH (a directory with include/ and lib/) is kept;
#      b. a preinstalled PyTorch 2.11 (`python3 -c 'import torch'`), e.g. the
#         CUDA build on a GPU machine, is used in place: LIBTORCH = its package
#         directory (it holds include/ and lib/);
#      c. otherwise a CPU-usable libtorch is cut out of PyPI's torch==2.11.0
#         wheel into $HOME/.cache/cephalo/libtorch-2.11.0: the C++ headers,
#         libtorch_cpu, libc10, libshm, libgomp, plus libcudart.so.13 and
#         libcupti.so.13 from the nvidia-cuda-runtime / nvidia-cuda-cupti
#         wheels (libtorch_cpu.so of the CUDA wheel needs both at load time,
#         even on CPU). The wheel's own libtorch.so needs libtorch_cuda.so,
#         which we do not ship, so a CPU stand-in libtorch.so (empty, depending
#         on libtorch_cpu and libc10, which is what a CPU libtorch.so is) is
#         compiled with cc instead.
#   2. OpenMPI + libclang (for rsmpi's bindgen) from Debian when `mpicc` or
#      libclang is missing.
#   3. Exports LIBTORCH, LD_LIBRARY_PATH, and the OpenMPI variables that let
#      mpirun run as root, oversubscribe the cores and work in containers;
#      remote launch (a hostfile's hosts over ssh) stays possible.
#
# Needs: bash, python3 with pip (installed from Debian when missing), a C
# compiler, network access to PyPI and Debian on the first run only.
# Environment knobs: CEPHALO_CACHE (default $HOME/.cache/cephalo).

__cephalo_exec_env() {
    local torch_version="2.11.0"
    local cache="${CEPHALO_CACHE:-$HOME/.cache/cephalo}"
    local dest="$cache/libtorch-$torch_version"
    local sudo=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi

    local apt_updated=0
    __cephalo_apt() {
        echo "exec-env: apt-get install $*" >&2
        local log
        log="$(mktemp)"
        if [ "$apt_updated" = 0 ]; then
            $sudo apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; return 1; }
            apt_updated=1
        fi
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >"$log" 2>&1 \
            || { cat "$log" >&2; rm -f "$log"; return 1; }
        rm -f "$log"
    }

    # ---- 1. libtorch ----------------------------------------------------
    if [ -n "${LIBTORCH:-}" ] && [ -d "$LIBTORCH/lib" ] && [ -d "$LIBTORCH/include" ]; then
        : # a: keep the caller's libtorch
    else
        local py_torch=""
        if command -v python3 >/dev/null 2>&1; then
            py_torch="$(python3 -c 'import os, torch; print(torch.__version__.split("+")[0], os.path.dirname(torch.__file__))' 2>/dev/null || true)"
        fi
        if [ -n "$py_torch" ] && [ "${py_torch%% *}" = "$torch_version" ] \
            && [ -d "${py_torch#* }/include" ] && [ -d "${py_torch#* }/lib" ]; then
            export LIBTORCH="${py_torch#* }" # b: preinstalled PyTorch 2.11
        else
            if [ ! -f "$dest/.complete" ]; then # c: cut it out of the wheel
                echo "exec-env: fetching libtorch $torch_version into $dest (about 530 MB download, once)" >&2
                if ! python3 -m pip --version >/dev/null 2>&1; then
                    __cephalo_apt python3 python3-pip || { echo "exec-env: cannot install python3-pip" >&2; return 1; }
                fi
                if ! command -v cc >/dev/null 2>&1; then
                    __cephalo_apt build-essential || { echo "exec-env: cannot install a C compiler" >&2; return 1; }
                fi
                local tmp
                tmp="$(mktemp -d)"
                local plat="--only-binary=:all: --no-deps --python-version 3.12 --implementation cp"
                local n
                for n in 17 24 25 26 27 28; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
                plat="$plat --platform manylinux2014_x86_64"
                # shellcheck disable=SC2086
                if ! python3 -m pip download -q $plat -d "$tmp" "torch==$torch_version" \
                    "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cupti==13.0.85" >&2; then
                    echo "exec-env: pip download of torch==$torch_version failed" >&2
                    rm -rf "$tmp"
                    return 1
                fi
                rm -rf "$dest"
                mkdir -p "$dest/lib"
                if ! python3 - "$tmp" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
libs = {"libtorch_cpu.so", "libc10.so", "libshm.so", "libgomp.so.1"}
cuda = {"libcudart.so.13", "libcupti.so.13"}
found = set()
for whl in sorted(glob.glob(os.path.join(tmp, "*.whl"))):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            name = info.filename
            base = os.path.basename(name)
            if name.startswith("torch/include/") and not name.endswith("/"):
                out = os.path.join(dest, name[len("torch/"):])
            elif (name.startswith("torch/lib/") and base in libs) or (
                name.startswith("nvidia/") and "/lib/" in name and base in cuda
            ):
                out = os.path.join(dest, "lib", base)
                found.add(base)
            else:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
missing = (libs | cuda) - found
if missing:
    sys.exit("exec-env: not found in the wheels: " + ", ".join(sorted(missing)))
PY
                then
                    rm -rf "$tmp"
                    return 1
                fi
                rm -rf "$tmp"
                # CPU stand-in for libtorch.so (the wheel's needs libtorch_cuda.so).
                if ! echo 'int cephalo_libtorch_cpu_stub;' | cc -shared -fPIC -x c - \
                    -o "$dest/lib/libtorch.so" -Wl,--no-as-needed -L"$dest/lib" \
                    -ltorch_cpu -lc10 -Wl,-rpath,'$ORIGIN'; then
                    echo "exec-env: cannot build the libtorch.so stand-in" >&2
                    return 1
                fi
                echo "$torch_version" >"$dest/build-version"
                touch "$dest/.complete"
            fi
            export LIBTORCH="$dest"
        fi
    fi

    # ---- 2. OpenMPI and libclang ---------------------------------------
    local have_clang=0 f
    for f in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-*.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
        if [ -e "$f" ]; then have_clang=1; break; fi
    done
    if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1 || [ "$have_clang" = 0 ]; then
        __cephalo_apt libopenmpi-dev openmpi-bin libclang-dev || {
            echo "exec-env: cannot install libopenmpi-dev openmpi-bin libclang-dev" >&2
            return 1
        }
    fi

    # ---- 3. exports -----------------------------------------------------
    case ":${LD_LIBRARY_PATH:-}:" in
        *":$LIBTORCH/lib:"*) ;;
        *) export LD_LIBRARY_PATH="$LIBTORCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
    esac
    # mpirun as root (CI and the device machines run as root).
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # More ranks than cores (3 ranks on 2 cores in the tests).
    export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
    # Containers (gVisor, restricted ptrace): no CMA single-copy (it aborts
    # where process_vm_readv is refused; measured here it is no faster for
    # unit-sized messages).
    export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
    # Remote launch: mpirun reaches a hostfile's hosts through its rsh agent
    # (ssh by default), so the agent is left alone. Only where neither ssh
    # nor rsh exists (a bare container) is it emptied: Open MPI 4 refuses to
    # start even local ranks when its agent cannot be found, and local ranks
    # need none. A caller's own setting always stays.
    if [ -z "${OMPI_MCA_plm_rsh_agent+set}" ] \
        && ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
        export OMPI_MCA_plm_rsh_agent=""
        echo "exec-env: no ssh or rsh here: local ranks only (install openssh-client for --hostfile)" >&2
    fi
    unset -f __cephalo_apt
    return 0
}

if __cephalo_exec_env; then
    unset -f __cephalo_exec_env
    echo "exec-env: LIBTORCH=$LIBTORCH, mpirun=$(command -v mpirun)" >&2
    true
else
    unset -f __cephalo_exec_env
    echo "exec-env: set-up failed (see above)" >&2
    false
fi
