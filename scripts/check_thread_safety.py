#!/usr/bin/env python3
"""Checks the head's and the agent's locking with Clang's thread-safety analysis.

Compiles (syntax only) every source of src/head and src/agent (and the HTTP front,
src/common/http_server.cc, whose pools they share) listed in the build's
compile_commands.json with `clang++ -Wthread-safety -Werror`: a field marked
GUARDED_BY(mu_) read without mu_, or a REQUIRES(mu_) method called without it, fails the
check with Clang's message. The annotations and the annotated Mutex live in
src/common/mutex.h. GCC builds the project; Clang only checks it.

A file found clean is remembered the way ccache's direct mode remembers a compile: under
a key of the compiler, its flags and the file's path, the list of every file it read
(from clang's dependency output) with each one's hash. When none of them changed, the file
is clean without a compile, so a warm CI rerun checks in seconds what a cold one checks in
a minute. Paths under the checkout are kept relative to it, so a fresh clone at another
path hits too. The cache lives beside ccache's (`ccache -k cache_dir`), else in
~/.cache; --no-cache turns it off. Only clean results are kept: a violation is always
compiled and shown again.

Usage: check_thread_safety.py --build BUILD_DIR [--jobs N] [--self-test] [--no-cache]
  --self-test  also proves the check can fail: a snippet that reads a guarded field
               without its lock must be rejected.
Exit codes: 0 clean, 1 violations (or a compile error), 77 no suitable clang (skipped).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
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


def cache_dir():
    """Where clean results are remembered: beside ccache's cache when ccache exists."""
    base = None
    if shutil.which("ccache"):
        p = subprocess.run(["ccache", "-k", "cache_dir"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        if p.returncode == 0 and p.stdout.strip():
            base = p.stdout.strip()
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cohort-thread-safety")


class ResultCache:
    """Clean results keyed by compiler, flags and path, valid while no input file changed."""

    def __init__(self, directory, root, compiler_id):
        self.dir = directory
        self.root = root.rstrip("/") + "/"
        self.compiler_id = compiler_id
        self.file_hashes = {}

    def portable(self, text):
        return text.replace(self.root, "<root>/")

    def key(self, rel, flags, extra):
        text = "\0".join([self.compiler_id, rel] + CLANG_FLAGS + flags + extra)
        return hashlib.sha256(self.portable(text).encode()).hexdigest()

    def hash_file(self, path):
        if path not in self.file_hashes:
            try:
                with open(path, "rb") as f:
                    self.file_hashes[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                self.file_hashes[path] = None
        return self.file_hashes[path]

    def _manifest(self, key):
        return os.path.join(self.dir, key[:2], key + ".json")

    def is_clean(self, key):
        try:
            with open(self._manifest(key)) as f:
                deps = json.load(f)
        except (OSError, ValueError):
            return False
        for path, digest in deps.items():
            real = self.root + path[len("<root>/"):] if path.startswith("<root>/") else path
            if self.hash_file(real) != digest:
                return False
        return True

    def remember_clean(self, key, dep_paths):
        deps = {}
        for path in dep_paths:
            digest = self.hash_file(path)
            if digest is None:
                return
            deps[self.portable(path)] = digest
        target = self._manifest(key)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(deps, f)
            os.replace(tmp, target)
        except OSError as e:
            print(f"note: could not remember a clean result in {self.dir}: {e}")


def read_depfile(path):
    """The files a make-style dependency file names (the target before ':' left out)."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    _, _, deps = text.partition(": ")
    tokens = re.split(r"(?<!\\)\s+", deps.strip())
    return [os.path.normpath(t.replace("\\ ", " ")) for t in tokens if t]


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
    ap.add_argument("--no-cache", action="store_true")
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
    cache = None
    if not args.no_cache:
        _, version = run([clang, "--version"])
        cache = ResultCache(cache_dir(), root, clang + "\0" + version)
    with tempfile.TemporaryDirectory(prefix="cohort-tsa-") as tmp:
        if args.self_test and not self_test(clang, tmp):
            return 1
        # Files whose every input is unchanged since they were last found clean.
        todo = [e for e in entries
                if not (cache and cache.is_clean(cache.key(e[0], e[1], PCH_HEADERS)))]
        cached = len(entries) - len(todo)
        # One precompiled header per distinct flag set, and the files it read.
        pchs = {}
        pch_deps = {}
        for _, flags in todo:
            key = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:12]
            if key in pchs:
                continue
            header = os.path.join(tmp, f"pch-{key}.h")
            with open(header, "w") as f:
                f.write("".join(f"#include {h}\n" for h in PCH_HEADERS))
            pch = header + ".pch"
            cmd = [clang] + flags + [c for c in CLANG_FLAGS if c != "-fsyntax-only"] + \
                ["-x", "c++-header", header, "-o", pch, "-MD", "-MF", pch + ".d"]
            rc, out = run(cmd)
            pchs[key] = pch if rc == 0 else None
            if rc == 0:
                pch_deps[key] = [d for d in read_depfile(pch + ".d") if d != header]
            if rc != 0:
                print(f"note: precompiled header failed, compiling without it:\n{out}")

        def check(item):
            rel, flags = item
            key = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:12]
            pch = ["-include-pch", pchs[key]] if pchs.get(key) else []
            # A file can be listed twice, with different flags (the task shim's sources).
            depfile = os.path.join(
                tmp, hashlib.sha1((rel + " ".join(flags)).encode()).hexdigest() + ".d")
            rc, out = run([clang] + flags + CLANG_FLAGS + pch + ["-MD", "-MF", depfile] +
                          [os.path.join(root, rel)])
            if rc == 0 and cache:
                # The precompiled header is a file of this run: its inputs count instead.
                deps = [d for d in read_depfile(depfile) if not d.startswith(tmp + "/")]
                cache.remember_clean(cache.key(rel, flags, PCH_HEADERS),
                                     deps + pch_deps.get(key, []))
            return rel, rc, out

        failed = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for rel, rc, out in pool.map(check, todo):
                if rc != 0:
                    failed += 1
                    print(f"--- {rel}\n{out}")
    took = time.time() - start
    print(f"thread-safety: {len(entries) - failed} of {len(entries)} files clean, "
          f"{cached} of them unchanged since found clean "
          f"({os.path.basename(clang)}, {took:.1f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
