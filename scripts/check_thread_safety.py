#!/usr/bin/env python3
"""Checks the head's and the agent's locking with Clang's thread-safety analysis.

Compiles (syntax only) every source of src/head and src/agent (and the HTTP front,
src/common/http_server.cc, whose pools they share) listed in the build's
compile_commands.json with `clang++ -Wthread-safety -Werror`: a field marked
GUARDED_BY(mu_) read without mu_, or a REQUIRES(mu_) method called without it, fails the
check with Clang's message. The annotations and the annotated Mutex live in
src/common/mutex.h. GCC builds the project; Clang only checks it.

Usage: check_thread_safety.py --build BUILD_DIR [--jobs N] [--self-test]
  --self-test  also proves the check can fail: a snippet that reads a guarded field
               without its lock must be rejected.
Exit codes: 0 clean, 1 violations (or a compile error), 77 no suitable clang (skipped).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

DIRS = ("src/head/", "src/agent/", "src/common/http_server.cc")
# libstdc++ 12 hides std::expected unless __cpp_concepts >= 202002L, a value Clang (14-18)
# does not yet claim although it compiles what <expected> needs.
CLANG_FLAGS = ["-std=c++2b", "-U__cpp_concepts", "-D__cpp_concepts=202002L", "-fsyntax-only",
               "-Wthread-safety", "-Wthread-safety-beta", "-Werror=thread-safety",
               "-Werror=thread-safety-beta", "-Wno-unknown-warning-option"]
# Headers that every checked file pulls in: precompiled once per run.
PCH_HEADERS = ["<httplib.h>", "<nlohmann/json.hpp>", "<spdlog/spdlog.h>", "<fmt/format.h>",
               "<expected>", "<map>", "<string>", "<vector>", "<thread>", "<mutex>"]


def find_clang():
    for name in ("clang++-16", "clang++-17", "clang++-18", "clang++-15"):
        path = shutil.which(name)
        if path:
            return path
    return None


def keep_flags(command):
    """The include and macro flags of a compile command (no output, optimisation or warnings)."""
    args = shlex.split(command)
    out = []
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if a.startswith(("-I", "-D", "-U", "-isystem")):
            out.append(a)
            if a in ("-I", "-D", "-U", "-isystem"):
                out.append(args[i + 1])
                i += 1
        i += 1
    return out


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def self_test(clang, tmp):
    src = os.path.join(tmp, "violation.cc")
    with open(src, "w") as f:
        f.write('#include "common/mutex.h"\n'
                "struct Counter {\n"
                "  cohort::Mutex mu_;\n"
                "  int n_ GUARDED_BY(mu_) = 0;\n"
                "  int Read() { return n_; }  // no lock: must be rejected\n"
                "  int Locked() { cohort::MutexLock l(mu_); return n_; }\n"
                "};\n"
                "int main() { Counter c; return c.Read() + c.Locked(); }\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rc, out = run([clang, "-I", os.path.join(root, "src")] + CLANG_FLAGS + [src])
    if rc == 0 or "requires holding mutex" not in out:
        print("self-test FAILED: an unguarded read was not rejected\n" + out)
        return False
    print("self-test: an unguarded read of a GUARDED_BY field is rejected, as it should be")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()

    clang = find_clang()
    if not clang:
        print("SKIPPED: no clang++-15..18 found (scripts/install-deps.sh installs clang-16)")
        return 77
    db_path = os.path.join(args.build, "compile_commands.json")
    with open(db_path) as f:
        db = json.load(f)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    entries = []
    for e in db:
        rel = os.path.relpath(e["file"], root)
        if rel.startswith(DIRS) and rel.endswith(".cc"):
            entries.append((rel, keep_flags(e["command"])))
    if not entries:
        print(f"no src/head or src/agent sources in {db_path}")
        return 1

    start = time.time()
    with tempfile.TemporaryDirectory(prefix="cohort-tsa-") as tmp:
        if args.self_test and not self_test(clang, tmp):
            return 1
        # One precompiled header per distinct flag set.
        pchs = {}
        for _, flags in entries:
            key = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:12]
            if key in pchs:
                continue
            header = os.path.join(tmp, f"pch-{key}.h")
            with open(header, "w") as f:
                f.write("".join(f"#include {h}\n" for h in PCH_HEADERS))
            pch = header + ".pch"
            cmd = [clang] + flags + [c for c in CLANG_FLAGS if c != "-fsyntax-only"] + \
                ["-x", "c++-header", header, "-o", pch]
            rc, out = run(cmd)
            pchs[key] = pch if rc == 0 else None
            if rc != 0:
                print(f"note: precompiled header failed, compiling without it:\n{out}")

        def check(item):
            rel, flags = item
            key = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:12]
            pch = ["-include-pch", pchs[key]] if pchs.get(key) else []
            return rel, *run([clang] + flags + CLANG_FLAGS + pch + [os.path.join(root, rel)])

        failed = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for rel, rc, out in pool.map(check, entries):
                if rc != 0:
                    failed += 1
                    print(f"--- {rel}\n{out}")
    took = time.time() - start
    print(f"thread-safety: {len(entries) - failed} of {len(entries)} files clean "
          f"({os.path.basename(clang)}, {took:.1f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
