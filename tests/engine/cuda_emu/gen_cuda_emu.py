#!/usr/bin/env python3
"""A CUDA kernel source (.cu) -> a C++ file that runs its kernels on the CPU emulator (emu.h).

Rewrites, all textual:
  - a "// ---- primitives: begin ----" ... "// ---- primitives: end ----" section (inline-asm
    wrappers, attention.cu) -> #include "primitives.inc" (the emulated primitives);
  - `extern __shared__ [__align__(N)] T name[];` (dynamic shared memory) -> a T* to the
    emulator's per-block buffer;
  - `__shared__ T a[N], b[M];` / `__shared__ T s;` (static shared memory, declared inside a
    kernel) -> emu::SharedArray<T> / emu::SharedRef<T> views of per-block storage, every access
    shadowed for races and reads of unwritten words (see emu.h);
  - `#include <cub/...>` -> cub_shim.h (a host stand-in for the few cub calls used);
  - kernel<<<grid, block, smem, stream>>>(args) -> emu::Launch(grid, block, smem, [&] { kernel(args); }).

Usage: gen_cuda_emu.py KERNEL_CU OUT_CC [--expect-dynamic-smem N]
"""
import re
import sys


def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '(<[{':
            depth += 1
        if ch in ')>]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def translate(src, src_path, expect_dynamic=None):
    if '// ---- primitives: begin ----' in src:
        b = src.index('// ---- primitives: begin ----')
        e = src.index('// ---- primitives: end ----')
        # Blank lines keep the #line numbering of the rest of the file right.
        src = src[:b] + '#include "primitives.inc"' + '\n' * src[b:e].count('\n') + src[e:]

    src, n_cub = re.subn(r'#include\s*<cub/[^>]*>', '#include "cub_shim.h"', src)

    dyn = re.compile(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([^;\[\]]+?)\s+(\w+)\s*\[\s*\]\s*;')
    src, n_dyn = dyn.subn(
        lambda m: f'{m.group(1)}* const {m.group(2)} = reinterpret_cast<{m.group(1)}*>(emu::SharedBase());', src)
    if expect_dynamic is not None and n_dyn != expect_dynamic:
        sys.exit(f'{src_path}: expected {expect_dynamic} dynamic shared-memory declarations, found {n_dyn}')

    def static_repl(m):
        typ, decls = m.group(1).strip(), m.group(2)
        out = []
        for d in split_top(decls):
            a = re.fullmatch(r'(\w+)\s*\[(.+)\]', d, flags=re.S)
            if a:
                out.append(f'emu::SharedArray<{typ}> {a.group(1)} = emu::StaticShared<{typ}>({a.group(2)});')
            elif re.fullmatch(r'\w+', d):
                out.append(f'emu::SharedRef<{typ}> {d} = emu::StaticShared<{typ}>(1)[0];')
            else:
                sys.exit(f'{src_path}: cannot translate the shared declaration {d!r}')
        return ' '.join(out)

    static = re.compile(r'(?<!extern )__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+(?:<[^;>]*>)?)\s+([^;]+);')
    src, n_static = static.subn(static_repl, src)
    if '__shared__' in re.sub(r'//[^\n]*', '', src):
        sys.exit(f'{src_path}: a __shared__ declaration was left untranslated')

    launches = 0

    def repl(m):
        nonlocal launches
        launches += 1
        kern, cfg, args = m.group(1), m.group(2), m.group(3)
        parts = split_top(cfg)
        grid, block = parts[0], parts[1]
        smem = parts[2] if len(parts) > 2 else '0'
        return f'emu::Launch({grid}, {block}, {smem}, [&] {{ {kern}({args}); }});'

    src = re.sub(r'(\w+(?:<[\w\s,]+>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', repl, src, flags=re.S)
    if launches == 0:
        sys.exit(f'{src_path}: no kernel launches found')
    if '<<<' in src:
        sys.exit(f'{src_path}: a kernel launch was left untranslated')
    stats = f'{launches} launches, {n_dyn} dynamic + {n_static} static shared declarations, {n_cub} cub includes'
    return '#include "emu.h"\n' + f'#line 1 "{src_path}"\n' + src, stats


def main(argv):
    args = list(argv[1:])
    expect = None
    if '--expect-dynamic-smem' in args:
        i = args.index('--expect-dynamic-smem')
        expect = int(args[i + 1])
        del args[i:i + 2]
    src_path, out_path = args
    out, stats = translate(open(src_path).read(), src_path, expect)
    open(out_path, 'w').write(out)
    print(f'{out_path}: {stats}')


if __name__ == '__main__':
    main(sys.argv)
