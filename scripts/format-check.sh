#!/usr/bin/env bash
# Checks that every C++/CUDA source of the tree is formatted as .clang-format
# says (LLVM style, clang-format 14: Debian 12's). Prints the files that are
# not and how to fix them; exit 1 if any. Usage: scripts/format-check.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."

CF=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null 2>&1; then CF="$candidate"; break; fi
done
if [ -z "$CF" ]; then
  echo "format-check: clang-format 14 is not installed (scripts/setup.sh installs clang-format-14)" >&2
  exit 1
fi
if ! "$CF" --version | grep -q 'version 14\.'; then
  echo "format-check: $("$CF" --version) is not clang-format 14; other versions format differently" >&2
  exit 1
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cpp' '*.h' '*.cu' ':!:testdata/*')
else
  mapfile -t files < <(find ir passes backend tools tests bench examples python \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null | sort)
fi
if [ "${1:-}" = "--fix" ]; then
  "$CF" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$CF" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -ne 0 ]; then
  echo "format-check: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "format-check: run scripts/format-check.sh --fix (or clang-format-14 -i FILE)" >&2
  exit 1
fi
echo "format-check: ${#files[@]} files formatted"
