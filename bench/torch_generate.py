#!/usr/bin/env python3
"""PyTorch baseline for bench_serve: eager greedy generation with a KV cache from the same
weights as `cohort serve` (a `cohort train` checkpoint: step_*/params.bin in GptModel's
layout, step_*/state.json for the shape), float32 on the CPU with the same threads.
Static batching: `--batch` prompts of `--prompt` tokens each decode `--tokens` tokens
together (the usual eager loop: one forward of the prompts, then one per token, keys and
values appended to a cache). Prints one JSON line: tokens/s, the time to the first token
(the prompts' forward and the first sample) of each repeat, and the greedy tokens of the
first sequence (bench_serve checks them against the server's), and tokens per CPU-second
of the fastest repeat (on a shared machine, less sensitive to other processes' load).

Usage: torch_generate.py --checkpoint STEP_DIR --threads N --batch B --prompt P --tokens K
       [--repeats R] [--prompt-ids 1,2,3] [--device cpu|cuda] [--dtype float32|bfloat16]

--device cuda (bench_serve_gpu): the weights and the cache on the GPU in --dtype; every
timed region ends in torch.cuda.synchronize(), so the host clock times the GPU's work.
"""
import argparse
import json
import math
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    sys.stderr.write(f"torch_generate.py: cannot import torch ({e})\n")
    sys.exit(2)


def load(step_dir):
    with open(f"{step_dir}/state.json") as f:
        cfg = json.load(f)["config"]
    V, T, L, NH, C = cfg["vocab_size"], cfg["max_seq_len"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    Vp = (V + 127) // 128 * 128
    flat = torch.from_numpy(np.fromfile(f"{step_dir}/params.bin", dtype="<f4"))
    pos = 0

    def take(*shape):
        nonlocal pos
        n = 1
        for s in shape:
            n *= s
        t = flat[pos:pos + n].view(*shape)
        pos += n
        return t

    w = {"wte": take(Vp, C), "wpe": take(T, C), "layers": []}
    for _ in range(L):
        w["layers"].append({
            "ln1_w": take(C), "ln1_b": take(C), "qkv_w": take(3 * C, C), "qkv_b": take(3 * C),
            "proj_w": take(C, C), "proj_b": take(C), "ln2_w": take(C), "ln2_b": take(C),
            "fc_w": take(4 * C, C), "fc_b": take(4 * C), "fcp_w": take(C, 4 * C), "fcp_b": take(C)})
    w["lnf_w"], w["lnf_b"] = take(C), take(C)
    assert pos == flat.numel(), f"params.bin has {flat.numel()} floats, the layout {pos}"
    return cfg, w


def forward(cfg, w, tokens, start, cache):
    """tokens (B, n) at positions start..start+n-1; cache: per layer [k, v] (B, NH, t, hs) or None.
    Returns the logits of the last position (B, V)."""
    C, NH, V = cfg["n_embd"], cfg["n_head"], cfg["vocab_size"]
    hs = C // NH
    B, n = tokens.shape
    F = torch.nn.functional
    x = w["wte"][tokens] + w["wpe"][start:start + n]
    for l, p in enumerate(w["layers"]):
        h = F.layer_norm(x, (C,), p["ln1_w"], p["ln1_b"], 1e-5)
        q, k, v = F.linear(h, p["qkv_w"], p["qkv_b"]).split(C, dim=2)
        q = q.view(B, n, NH, hs).transpose(1, 2)
        k = k.view(B, n, NH, hs).transpose(1, 2)
        v = v.view(B, n, NH, hs).transpose(1, 2)
        if cache[l] is not None:
            k = torch.cat([cache[l][0], k], dim=2)
            v = torch.cat([cache[l][1], v], dim=2)
        cache[l] = [k, v]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        t = k.shape[2]
        mask = torch.ones(n, t, dtype=torch.bool, device=x.device).tril(diagonal=t - n)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, n, C)
        x = x + F.linear(y, p["proj_w"], p["proj_b"])
        h = F.layer_norm(x, (C,), p["ln2_w"], p["ln2_b"], 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, p["fc_w"], p["fc_b"]), approximate="tanh"), p["fcp_w"], p["fcp_b"])
    x = F.layer_norm(x[:, -1, :], (C,), w["lnf_w"], w["lnf_b"], 1e-5)
    return F.linear(x, w["wte"][:V])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--prompt-ids", default="")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, w = load(a.checkpoint)
    dtype = getattr(torch, a.dtype)
    to = lambda t: t.to(device=a.device, dtype=dtype)
    w = {k: (to(v) if torch.is_tensor(v) else [{n: to(x) for n, x in p.items()} for p in v])
         for k, v in w.items()}
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if a.prompt_ids:
        prompt = [int(t) for t in a.prompt_ids.split(",")]
    else:
        prompt = [(7 * i + 3) % cfg["vocab_size"] for i in range(a.prompt)]
    tokens = torch.tensor([prompt] * a.batch, dtype=torch.long, device=a.device)
    times, ttfts, first, cpus = [], [], [], []
    with torch.no_grad():
        for r in range(a.repeats):
            cache = [None] * cfg["n_layer"]
            c0 = time.process_time()
            t0 = time.perf_counter()
            logits = forward(cfg, w, tokens, 0, cache)
            nxt = logits.argmax(dim=-1, keepdim=True)
            sync()
            ttfts.append(time.perf_counter() - t0)
            out = [nxt]
            pos = tokens.shape[1]
            for _ in range(a.tokens - 1):
                logits = forward(cfg, w, nxt, pos, cache)
                nxt = logits.argmax(dim=-1, keepdim=True)
                out.append(nxt)
                pos += 1
            sync()
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            first = [int(t[0, 0]) for t in out]
    best = min(times)
    print(json.dumps({"tokens_per_second": a.batch * a.tokens / best, "seconds": times, "ttft_seconds": ttfts,
                      "tokens_per_cpu_second": a.batch * a.tokens / cpus[times.index(best)],
                      "first_sequence": first, "torch": torch.__version__, "threads": a.threads,
                      "device": a.device, "dtype": a.dtype}))


if __name__ == "__main__":
    main()
