#!/usr/bin/env python3
"""attention.cu -> a C++ file that runs its kernels on the CPU emulator (emu.h).

The attention-specific entry point of gen_cuda_emu.py (which see): the same rewrites, plus
the check that attention.cu's dynamic shared-memory declaration appears twice (forward,
backward).

Usage: gen_attention_emu.py ATTENTION_CU OUT_CC
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_cuda_emu  # noqa: E402

gen_cuda_emu.main([sys.argv[0], sys.argv[1], sys.argv[2], '--expect-dynamic-smem', '2'])
