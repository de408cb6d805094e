#!/usr/bin/env python3
"""attention.cu -> a C++ file that runs its kernels on the CPU emulator (emu.h).

The primitives section of attention.cu (every instruction that touches shared memory or the
tensor cores) is replaced by primitives.inc, the dynamic shared-memory declaration by the
emulator's per-block buffer, and each kernel<<<grid, block, smem, stream>>>(args) launch by
emu::Launch(grid, block, smem, [&] { kernel(args); }).

Usage: gen_attention_emu.py ATTENTION_CU OUT_CC
"""
import re
import sys

src_path, out_path = sys.argv[1], sys.argv[2]
src = open(src_path).read()
b = src.index('// ---- primitives: begin ----')
e = src.index('// ---- primitives: end ----')
src = src[:b] + '#include "primitives.inc"\n' + src[e:]
decl = 'extern __shared__ __align__(16) unsigned char attention_smem[];'
if src.count(decl) != 2:
    sys.exit(f'{src_path}: expected the shared-memory declaration twice (forward, backward)')
src = src.replace(decl, 'unsigned char* const attention_smem = emu::SharedBase();')


def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '(<':
            depth += 1
        if ch in ')>':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


launches = 0


def repl(m):
    global launches
    launches += 1
    kern, cfg, args = m.group(1), m.group(2), m.group(3)
    grid, block, smem, _stream = split_top(cfg)
    return f'emu::Launch({grid}, {block}, {smem}, [&] {{ {kern}({args}); }});'


src = re.sub(r'(\w+(?:<\w+>)?)<<<(.*?)>>>\((.*?)\);', repl, src, flags=re.S)
if launches == 0:
    sys.exit(f'{src_path}: no kernel launches found')
open(out_path, 'w').write('#include "emu.h"\n' + src)
print(f'{out_path}: {launches} launches routed to the emulator')
