#!/usr/bin/env python3
"""Writes gpt2_tiny_hf.safetensors: a tiny GPT-2 in Hugging Face's GPT2LMHeadModel layout
(names prefixed "transformer.", Conv1D weights stored (in, out), attn.bias /
attn.masked_bias buffers, a tied lm_head.weight), using only struct and json.

Shape: vocab 5, positions 3, 1 layer, n_embd 4. Tensor number k (in the order of TENSORS
below) holds value k * 1000 + i at flat row-major index i, so a test can tell exactly
where every element must land. Run from this folder: python3 make_gpt2_tiny_hf.py
"""
import json
import struct

V, T, C = 5, 3, 4
TENSORS = [
    ("transformer.wte.weight", [V, C]),
    ("transformer.wpe.weight", [T, C]),
    ("transformer.h.0.ln_1.weight", [C]),
    ("transformer.h.0.ln_1.bias", [C]),
    ("transformer.h.0.attn.c_attn.weight", [C, 3 * C]),
    ("transformer.h.0.attn.c_attn.bias", [3 * C]),
    ("transformer.h.0.attn.c_proj.weight", [C, C]),
    ("transformer.h.0.attn.c_proj.bias", [C]),
    ("transformer.h.0.ln_2.weight", [C]),
    ("transformer.h.0.ln_2.bias", [C]),
    ("transformer.h.0.mlp.c_fc.weight", [C, 4 * C]),
    ("transformer.h.0.mlp.c_fc.bias", [4 * C]),
    ("transformer.h.0.mlp.c_proj.weight", [4 * C, C]),
    ("transformer.h.0.mlp.c_proj.bias", [C]),
    ("transformer.ln_f.weight", [C]),
    ("transformer.ln_f.bias", [C]),
    # Buffers and the tied head: present in real files, ignored on import.
    ("transformer.h.0.attn.bias", [1, 1, T, T]),
    ("transformer.h.0.attn.masked_bias", []),
    ("lm_head.weight", [V, C]),
]


def main():
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for k, (name, shape) in enumerate(TENSORS):
        n = 1
        for d in shape:
            n *= d
        values = [k * 1000 + i for i in range(n)]
        blob = struct.pack("<%df" % n, *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open("gpt2_tiny_hf.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


if __name__ == "__main__":
    main()
