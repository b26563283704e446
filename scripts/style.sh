#!/usr/bin/env bash
# The style tier (run by scripts/test.sh after the build):
#  1. every C/C++ file is formatted as the repository's .clang-format says;
#  2. Clang's thread-safety analysis (-Wthread-safety, as errors) passes over every source
#     file, compiled -fsyntax-only with the flags of build/compile_commands.json: fields say
#     which Mutex guards them (base/thread_annotations.h) and Clang checks every access.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'src/*.c' 'tests/*.cc' 'tests/*.h' 'tests/*.c' \
  'bench/*.cc' 'bench/*.c')
echo "== clang-format (${#files[@]} files)"
clang-format --dry-run --Werror "${files[@]}"
echo "== clang thread-safety analysis"
python3 scripts/thread_safety.py build/compile_commands.json
