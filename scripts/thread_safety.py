#!/usr/bin/env python3
"""Runs Clang's thread-safety analysis over Warren's sources: each translation unit of
src/ in COMPILE_COMMANDS (the GCC build's) is compiled again by clang++ -fsyntax-only with
-Wthread-safety as an error. Two at a time; prints each failure's diagnostics; exits 1 on any."""

import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def command(entry: dict) -> list:
    argv = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a.startswith("-W"):  # GCC's warning set; only thread safety is asked here
            continue
        out.append(a)
    compiler = "clang" if entry["file"].endswith(".c") else "clang++"
    return [compiler] + FLAGS + out


def main() -> int:
    entries = [e for e in json.load(open(sys.argv[1]))
               if "/src/" in e["file"] and not e["file"].endswith(".c")]
    failed = 0

    def run(e):
        p = subprocess.run(command(e), cwd=e["directory"], capture_output=True, text=True)
        return e["file"], p.returncode, p.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("JOBS", os.cpu_count() or 2))) as pool:
        for path, rc, err in pool.map(run, entries):
            if rc != 0:
                failed += 1
                print(f"--- {path}\n{err}", flush=True)
    print(f"{len(entries)} files, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
