#!/usr/bin/env python3
"""PyTorch (float64) reference for the engine's parity tests.

    torch_reference.py model DIR   GPT-2 forward/backward: logits, loss, every gradient
    torch_reference.py adamw DIR   torch.optim.AdamW over two param groups, several steps
    torch_reference.py clip  DIR   torch.nn.utils.clip_grad_norm_

DIR holds config.json and raw little-endian arrays written by the C++ test; outputs are
raw float64 arrays in the same folder. A missing torch is an error (exit 2), never a skip.
"""
import json
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    import numpy as np
except ImportError as e:  # the test must fail loudly, not skip
    sys.stderr.write(f"torch_reference.py: cannot import torch ({e}); install python3-torch\n")
    sys.exit(2)


def load(d, name, dtype):
    return np.fromfile(os.path.join(d, name), dtype=dtype)


def save(d, name, arr):
    np.asarray(arr, dtype=np.float64).tofile(os.path.join(d, name))


def layout(cfg):
    """(name, shape) in the order of gpt.h's flat buffer."""
    C, Vp, Tm = cfg["n_embd"], cfg["padded_vocab_size"], cfg["max_seq_len"]
    out = [("wte", (Vp, C)), ("wpe", (Tm, C))]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        out += [(p + "ln1.w", (C,)), (p + "ln1.b", (C,)), (p + "qkv.w", (3 * C, C)),
                (p + "qkv.b", (3 * C,)), (p + "attn_proj.w", (C, C)), (p + "attn_proj.b", (C,)),
                (p + "ln2.w", (C,)), (p + "ln2.b", (C,)), (p + "fc.w", (4 * C, C)),
                (p + "fc.b", (4 * C,)), (p + "fc_proj.w", (C, 4 * C)), (p + "fc_proj.b", (C,))]
    out += [("ln_f.w", (C,)), ("ln_f.b", (C,))]
    return out


def gpt_forward(cfg, P, tokens):
    B, T, C, NH = cfg["B"], cfg["T"], cfg["n_embd"], cfg["n_head"]
    hs = C // NH
    x = P["wte"][tokens] + P["wpe"][:T].unsqueeze(0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln1.w"], P[p + "ln1.b"], eps=1e-5)
        qkv = h @ P[p + "qkv.w"].T + P[p + "qkv.b"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[p + "attn_proj.w"].T + P[p + "attn_proj.b"]
        h = F.layer_norm(x, (C,), P[p + "ln2.w"], P[p + "ln2.b"], eps=1e-5)
        h = F.gelu(h @ P[p + "fc.w"].T + P[p + "fc.b"], approximate="tanh")
        x = x + h @ P[p + "fc_proj.w"].T + P[p + "fc_proj.b"]
    x = F.layer_norm(x, (C,), P["ln_f.w"], P["ln_f.b"], eps=1e-5)
    return x @ P["wte"].T  # (B, T, Vp); only the first V columns are real


def run_model(d, cfg):
    flat = load(d, "params.f32", np.float32).astype(np.float64)
    tokens = torch.from_numpy(load(d, "tokens.i32", np.int32).astype(np.int64))
    targets = torch.from_numpy(load(d, "targets.i32", np.int32).astype(np.int64))
    B, T, V = cfg["B"], cfg["T"], cfg["vocab_size"]
    P, off = {}, 0
    for name, shape in layout(cfg):
        n = int(np.prod(shape))
        P[name] = torch.tensor(flat[off:off + n].reshape(shape), dtype=torch.float64,
                               requires_grad=True)
        off += n
    assert off == flat.size, (off, flat.size)
    logits = gpt_forward(cfg, P, tokens.view(B, T))
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets, ignore_index=-1)
    loss.backward()
    save(d, "logits.f64", logits.detach().numpy().ravel())
    save(d, "loss.f64", [loss.item()])
    save(d, "grads.f64", np.concatenate([P[n].grad.numpy().ravel() for n, _ in layout(cfg)]))


def run_adamw(d, cfg):
    n = cfg["num_params"]
    flat = load(d, "params.f32", np.float32).astype(np.float64)
    grads = load(d, "grads.f32", np.float32).astype(np.float64).reshape(cfg["steps"], n)
    ranges = cfg["ranges"]  # [[offset, count, decay], ...]
    tensors = [torch.tensor(flat[o:o + c], requires_grad=True) for o, c, _ in ranges]
    decay = [t for t, r in zip(tensors, ranges) if r[2]]
    no_decay = [t for t, r in zip(tensors, ranges) if not r[2]]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lrs"][0], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    for s in range(cfg["steps"]):
        for g in opt.param_groups:
            g["lr"] = cfg["lrs"][s]
        for t, (o, c, _) in zip(tensors, ranges):
            t.grad = torch.tensor(grads[s, o:o + c])
        opt.step()
    out_p, out_m, out_v = np.zeros(n), np.zeros(n), np.zeros(n)
    for t, (o, c, _) in zip(tensors, ranges):
        out_p[o:o + c] = t.detach().numpy()
        out_m[o:o + c] = opt.state[t]["exp_avg"].numpy()
        out_v[o:o + c] = opt.state[t]["exp_avg_sq"].numpy()
    save(d, "params.f64", out_p)
    save(d, "m.f64", out_m)
    save(d, "v.f64", out_v)


def run_clip(d, cfg):
    flat = load(d, "grads.f32", np.float32).astype(np.float64)
    tensors = []
    for o, c in cfg["ranges"]:
        t = torch.zeros(c, dtype=torch.float64, requires_grad=True)
        t.grad = torch.tensor(flat[o:o + c])
        tensors.append(t)
    norm = torch.nn.utils.clip_grad_norm_(tensors, cfg["max_norm"])
    save(d, "norm.f64", [float(norm)])
    save(d, "grads.f64", np.concatenate([t.grad.numpy() for t in tensors]))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("model", "adamw", "clip"):
        sys.stderr.write(__doc__)
        return 2
    d = sys.argv[2]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    torch.set_default_dtype(torch.float64)
    {"model": run_model, "adamw": run_adamw, "clip": run_clip}[sys.argv[1]](d, cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
