#!/usr/bin/python3
# The PyTorch peer of attention_bench: attention alone over the XLM-R serving batch's lengths (64
# sentences of 5..250 tokens, the LCG and seed of xlmr_bench), heads of 64 columns (base: 12 heads,
# d 768; large: 16, d 1024), q, k and v read from one packed [tokens, 3d] projection as Troupe reads
# it, in f32 and bf16. Each way PyTorch offers is timed and the best per dtype reported:
#   flash_varlen      aten._flash_attention_forward with cu_seqlens (FlashAttention-2 varlen; bf16 only)
#   efficient_varlen  aten._efficient_attention_forward with cu_seqlens (memory-efficient kernel; f32 and bf16)
#   sdpa_nested       F.scaled_dot_product_attention on nested (jagged) tensors, the public route
#   sdpa_nested_copy  the same on q, k and v copied out of the projection (the copies timed too), where
#                     nested tensors refuse the strided views
# Medians of batches of 10 calls timed by CUDA events; one JSON line.
#   /usr/bin/python3 examples/attention_torch.py [--model base|large] [--sentences 64] [--reps 20] [--device cuda] [--json]
import argparse, itertools, json, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--model", default="base", choices=["base", "large"])
p.add_argument("--sentences", type=int, default=64)
p.add_argument("--reps", type=int, default=20)
p.add_argument("--device", default="cuda")
p.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
a = p.parse_args()
dev = torch.device(a.device)
torch.backends.cuda.matmul.allow_tf32 = False
H = 12 if a.model == "base" else 16
HD, D = 64, 64 * H
SCALE = HD ** -0.5

state = 1234
def lcg():  # Knuth's MMIX LCG, stepped as xlmr_bench.cpp steps it (the lengths come first)
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
    return state >> 33

lengths = [5 + lcg() % 246 for _ in range(a.sentences)]
rows, longest = sum(lengths), max(lengths)
flops = sum(4.0 * L * L * D for L in lengths)
offsets = torch.tensor([0] + list(itertools.accumulate(lengths)), device=dev)
cu = offsets.to(torch.int32)
torch.manual_seed(0)
qkv32 = torch.rand(rows, 3 * D, device=dev) * 4 - 2


def split(qkv):  # [rows, heads, 64] views into the projection
    return [qkv[:, i * D:(i + 1) * D].view(rows, H, HD) for i in range(3)]


def flash_varlen(qkv):
    q, k, v = split(qkv)
    return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, longest, longest, 0.0, False, False, scale=SCALE)[0]


def efficient_varlen(qkv):
    q, k, v = (t.unsqueeze(0) for t in split(qkv))
    return torch.ops.aten._efficient_attention_forward(q, k, v, None, cu, cu, longest, longest, 0.0, 0, False,
                                                       scale=SCALE)[0]


def sdpa_nested(qkv, copy=False):
    q, k, v = (torch.nested.nested_tensor_from_jagged(t.contiguous() if copy else t, offsets=offsets).transpose(1, 2)
               for t in split(qkv))
    return F.scaled_dot_product_attention(q, k, v, scale=SCALE)


def median_us(fn, batch=10):
    fn()
    if dev.type != "cuda":
        ts = []
        for _ in range(a.reps):
            s = time.perf_counter()
            for _ in range(batch): fn()
            ts.append((time.perf_counter() - s) / batch)
        ts.sort(); return ts[len(ts) // 2] * 1e6
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch): fn()
        end.record(); end.synchronize()
        ts.append(start.elapsed_time(end) * 1e3 / batch)
    ts.sort(); return ts[len(ts) // 2]


with torch.inference_mode():
    methods, best = {}, {}
    for dtype, qkv in (("f32", qkv32), ("bf16", qkv32.to(torch.bfloat16))):
        for name, fn in (("flash_varlen", flash_varlen), ("efficient_varlen", efficient_varlen), ("sdpa_nested", sdpa_nested),
                         ("sdpa_nested_copy", lambda qkv: sdpa_nested(qkv, copy=True))):
            if name == "flash_varlen" and dtype == "f32": continue  # FlashAttention takes 16-bit floats only
            try:
                us = median_us(lambda: fn(qkv))
            except Exception as e:  # a way this build or device lacks: said, not fatal
                methods[f"{dtype}_{name}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                continue
            methods[f"{dtype}_{name}"] = round(us, 1)
            if dtype not in best or us < best[dtype][1]: best[dtype] = (name, us)

line = {"torch": torch.__version__, "device": str(dev), "model": a.model, "sentences": a.sentences, "tokens": rows,
        "heads": H, "d": D}
for dtype in ("f32", "bf16"):
    if dtype in best:
        line[f"{dtype}_us"] = round(best[dtype][1], 1)
        line[f"{dtype}_tflops"] = round(flops / best[dtype][1] / 1e6, 2)
        line[f"{dtype}_method"] = best[dtype][0]
line["methods"] = methods
print(json.dumps(line))
