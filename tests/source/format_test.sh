#!/usr/bin/env bash
# The C++ sources are formatted as .clang-format says (clang-format 14, Debian 12's): every .h and
# .cpp under src/, include/, apps/, tests/, examples/, fuzz/ and bench/ must come out of
# `clang-format --dry-run -Werror` unchanged. To fix: clang-format -i FILE (or the whole list).
# Also checks that the check flags a badly formatted file.
# Usage: format_test.sh SOURCE_DIR
src="${1:?usage: format_test.sh SOURCE_DIR}"
cd "$src" || exit 2
passed=0
failed=0
if ! command -v clang-format >/dev/null; then
  echo "FAIL: clang-format is not installed (scripts/setup.sh installs it)"
  echo "0 passed, 1 failed"
  exit 1
fi
mapfile -t files < <(find src include apps tests examples fuzz bench -type f \( -name '*.h' -o -name '*.cpp' \) | sort)
if out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1); then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: not formatted (clang-format -i FILE):"
  echo "$out" | grep -oE '^[^:]+\.(h|cpp):' | sort -u | head -50
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'int  f( int x ){return x;}\n' >"$tmp/bad.cpp"
cp .clang-format "$tmp/"
if (cd "$tmp" && ! clang-format --dry-run -Werror bad.cpp >/dev/null 2>&1); then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: the check accepted a badly formatted file"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
