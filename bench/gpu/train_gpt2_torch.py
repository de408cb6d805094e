#!/usr/bin/env python3
"""PyTorch baseline for `bench_train_throughput --device cuda`: the same GPT-2 model
(pre-LayerNorm blocks, causal attention, tanh GELU, output head tied to the token
embedding) trained on one GPU the way a PyTorch 2 user would: float32 master weights,
bf16 autocast, F.scaled_dot_product_attention (causal; PyTorch's flash kernel),
clip_grad_norm_(1.0) and fused AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
matrices and embeddings). Modes: "eager" and "compile" (torch.compile of the model).

Figures per mode: the median step time over --steps steps after --warmup warm-up steps
(torch.compile compiles during the warm-up), timed with CUDA events around each whole step
(zero_grad, forward, backward, clip, optimizer step); tokens/s = batch x seq / step; MFU =
tokens/s x FLOPs per token / the GPU's dense bf16 peak, with FLOPs per token computed exactly
as src/engine/model/gpt.cc's TrainingFlopsPerToken (PaLM's formula):
    6 x (L x (12 C^2 + 13 C) + 2 C + V x C) + 12 x L x C x T        (V = 50257, unpadded)
The embedding and head have 50304 rows (the vocabulary padded to a multiple of 128, as
Cohort pads it); targets stay below 50257.

Usage: train_gpt2_torch.py [--batch 8] [--seq 1024] [--layers 12] [--heads 12] [--embd 768]
                           [--vocab 50257] [--steps 20] [--warmup 10] [--modes eager,compile]
                           [--json FILE]
Prints one line per mode, then (with --json) writes {"modes": {mode: {...}}, ...}.
"""
import argparse
import json
import math
import statistics
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - reported to the caller
    sys.stderr.write(f"train_gpt2_torch.py: cannot import torch ({e})\n")
    sys.exit(2)

# Dense bf16 peaks, TFLOP/s: the rows of src/engine/trainer/device_peak.cc (first match wins).
PEAKS = [("GH200", 989.4), ("H200 NVL", 835.5), ("H200", 989.4), ("H100 PCIe", 756.5),
         ("H100 NVL", 835.5), ("H100", 989.4), ("B200", 2250.0), ("A100", 312.0),
         ("A800", 312.0), ("L40S", 362.05), ("A10G", 70.0), ("A10", 125.0), ("L4", 121.0),
         ("RTX 4090", 165.2), ("RTX 3090", 71.0)]


def peak_flops(name):
    for match, tflops in PEAKS:
        if match in name:
            return tflops * 1e12
    return 0.0


def flops_per_token(V, T, L, C):
    non_embedding = L * (12.0 * C * C + 13.0 * C) + 2.0 * C
    return 6.0 * (non_embedding + V * C) + 12.0 * L * C * T


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, Vp, T, L, NH, C):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("pos", torch.arange(T), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(self.pos[:T])
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def run_mode(mode, a, device):
    torch.manual_seed(0)
    Vp = (a.vocab + 127) // 128 * 128
    model = Gpt(Vp, a.seq, a.layers, a.heads, a.embd).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(1)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    events = []
    losses = []
    for _ in range(a.steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        events.append((start, end))
        losses.append(loss.detach())
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) / 1e3 for s, e in events]
    last = float(losses[-1])
    if not math.isfinite(last):
        raise RuntimeError(f"{mode}: the loss is {last}")
    del model, step_model, opt
    torch.cuda.empty_cache()
    return times, last


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("batch", 8), ("seq", 1024), ("layers", 12), ("heads", 12),
                          ("embd", 768), ("vocab", 50257), ("steps", 20), ("warmup", 10)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.stderr.write("train_gpt2_torch.py: no CUDA device visible to PyTorch\n")
        sys.exit(2)
    torch.set_float32_matmul_precision("high")
    device = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(device)
    peak = peak_flops(name)
    fpt = flops_per_token(a.vocab, a.seq, a.layers, a.embd)
    print(f"# train_gpt2_torch.py: torch {torch.__version__} on {name} (peak "
          f"{peak / 1e12:.1f} TFLOP/s dense bf16); GPT-2 L={a.layers} C={a.embd} "
          f"NH={a.heads} T={a.seq} B={a.batch}; {fpt:.4g} FLOPs per token; median of "
          f"{a.steps} steps after {a.warmup}", flush=True)
    out = {"torch": torch.__version__, "device": name, "peak_flops": peak,
           "flops_per_token": fpt, "batch": a.batch, "seq": a.seq, "modes": {}}
    for mode in [m for m in a.modes.split(",") if m]:
        if mode not in ("eager", "compile"):
            sys.stderr.write(f"train_gpt2_torch.py: unknown mode {mode!r}\n")
            sys.exit(2)
        try:
            times, loss = run_mode(mode, a, device)
        except Exception as e:  # a failed mode is reported, the others still run
            print(f"torch {mode:7s}: failed: {type(e).__name__}: {e}", flush=True)
            out["modes"][mode] = {"error": f"{type(e).__name__}: {e}"}
            continue
        step_s = statistics.median(times)
        tps = a.batch * a.seq / step_s
        mfu = tps * fpt / peak if peak > 0 else 0.0
        print(f"torch {mode:7s}: {tps:9.0f} tokens/s  step {1e3 * step_s:7.2f} ms  "
              f"{tps * fpt / 1e12:.1f} TFLOP/s  MFU {100 * mfu:.1f}%  loss {loss:.3f}", flush=True)
        out["modes"][mode] = {"tokens_per_s": tps, "step_ms": 1e3 * step_s, "mfu": mfu,
                              "loss": loss, "step_seconds": times}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
            f.write("\n")


if __name__ == "__main__":
    main()
