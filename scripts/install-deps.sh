#!/usr/bin/env bash
# Installs what epjit needs to build and test, and only what is missing.
# Idempotent: when everything is present it only checks (a few seconds).
#
#   scripts/install-deps.sh            Debian packages + the test venv
#   EPJIT_VENV=DIR                     where the test venv lives (default: .venv)
#   EPJIT_SKIP_APT=1                   check nothing on the system, only the venv
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv_dir=${EPJIT_VENV:-$repo_root/.venv}

# One list, grouped by what needs it. Debian 12 carries LLVM/MLIR 22 in bookworm-security.
debian_packages=(
  # compiler half: LLVM/MLIR 22, clang for AMD code objects, lit/FileCheck, objdump
  clang-22 lld-22 llvm-22 llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  # build
  cmake ninja-build ccache pkg-config
  # runtime and tools
  libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the hipRTC bundled in Debian's HIP runtime: tests the hipRTC adapter without a GPU
  libamdhip64-5 libamdhip64-dev
  # python test venv
  python3-venv python3-dev
)
# nanobind and scikit-build-core build the Python module (python/, pyproject.toml);
# numpy, ml_dtypes and pytest at the versions scripts/test-constraints.txt pins.
python_packages=(numpy ml_dtypes pytest nanobind scikit-build-core)
constraints=$repo_root/scripts/test-constraints.txt

log() { printf 'install-deps: %s\n' "$*"; }

missing_packages() {
  local pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || printf '%s\n' "$pkg"
  done
}

install_debian_packages() {
  local missing
  mapfile -t missing < <(missing_packages "${debian_packages[@]}")
  if ((${#missing[@]} == 0)); then
    log "Debian packages: all ${#debian_packages[@]} present"
    return
  fi
  log "Debian packages missing: ${missing[*]}"
  local sudo=""
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || { log "not root and no sudo: install ${missing[*]} by hand"; exit 1; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  log "installed ${#missing[@]} Debian packages"
}

venv_is_complete() {
  [[ -x $venv_dir/bin/python ]] || return 1
  "$venv_dir/bin/python" - "$constraints" "${python_packages[@]}" <<'PY' 2>/dev/null
import importlib, importlib.metadata, sys
pins = {}
for line in open(sys.argv[1]):
    name, sep, version = line.split("#")[0].strip().partition("==")
    if sep:
        pins[name] = version
for name in sys.argv[2:]:
    importlib.import_module(name.replace("-", "_"))
    if name in pins and importlib.metadata.version(name) != pins[name]:
        sys.exit(1)
PY
}

install_python_venv() {
  if venv_is_complete; then
    log "test venv: $venv_dir complete"
    return
  fi
  log "creating or upgrading the test venv $venv_dir (${python_packages[*]})"
  local python=${EPJIT_PYTHON:-python3}
  [[ -x $venv_dir/bin/python ]] || "$python" -m venv "$venv_dir"
  "$venv_dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade -c "$constraints" \
    "${python_packages[@]}"
  venv_is_complete || { log "test venv is incomplete after pip install"; exit 1; }
}

if [[ ${EPJIT_SKIP_APT:-0} != 1 ]]; then
  install_debian_packages
fi
install_python_venv
