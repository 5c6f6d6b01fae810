#!/usr/bin/env bash
# The installed headers (include/mixtrain, what `cmake --install` ships) are a closed public API:
# they include only each other and the standard library (no internal src/ header, which an
# install does not have) and no third-party JSON type (nlohmann stays inside the library; the
# public structs are plain). Usage: public_api_test.sh SOURCE_DIR
src="${1:?usage: public_api_test.sh SOURCE_DIR}"
cd "$src/include" || exit 2
passed=0
failed=0
internal=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' mixtrain | grep -vE '#[[:space:]]*include[[:space:]]*"mixtrain/' || true)
if [ -n "$internal" ]; then
  echo "FAIL: public headers include non-public headers:"
  echo "$internal"
  failed=$((failed + 1))
else
  passed=$((passed + 1))
fi
json=$(grep -rn 'nlohmann' mixtrain || true)
if [ -n "$json" ]; then
  echo "FAIL: public headers mention nlohmann (keep JSON types inside the library):"
  echo "$json"
  failed=$((failed + 1))
else
  passed=$((passed + 1))
fi
# Every included public header exists (a moved header leaves no dangling include behind).
missing=0
while IFS= read -r inc; do
  [ -f "$inc" ] || { echo "FAIL: included but not in include/: $inc"; missing=1; }
done < <(grep -rhoE '#[[:space:]]*include[[:space:]]*"mixtrain/[^"]+"' mixtrain | sed -E 's/.*"(mixtrain\/[^"]+)"/\1/' | sort -u)
if [ "$missing" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
