#!/usr/bin/python3
# The PyTorch peer of encoder_bench (../shared/anchors/encoder_torch.py, the Better Transformer tutorial's case):
# an XLM-R-large-shaped encoder (24 layers, d=1024, 16 heads, ffn 4096, post-LN, gelu, batch first)
# over a padded batch of lengths 4, 5, 250. Median ms of the slow path (train mode, autograd), the
# fastpath over every padded position (dense) and Better Transformer's nested fastpath (eval,
# no_grad, src_key_padding_mask -> nested tensors: padding skipped). --dtype bf16 also times the
# fastpaths with the model in bf16. On cuda: TF32 off (f32 comparisons), timed to torch.cuda.synchronize().
#   /usr/bin/python3 examples/encoder_torch.py [--device cpu|cuda] [--layers 24] [--dtype f32|bf16] [--threads 1] [--reps 5] [--json]
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--layers", type=int, default=24)
p.add_argument("--lengths", default="4,5,250")
p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
p.add_argument("--threads", type=int, default=1)  # PyTorch's best on the 2-core CPU (the anchors' README)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
a = p.parse_args()
dev, L = torch.device(a.device), a.layers
lens = [int(n) for n in a.lengths.split(",")]
torch.set_num_threads(a.threads)
if dev.type == "cuda":
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
S, B, D = max(lens), len(lens), 1024
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(D, 16, 4096, dropout=0.1, activation="gelu", batch_first=True)
enc = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=True).to(dev)
x = torch.rand(B, S, D, device=dev)
pad = torch.zeros(B, S, dtype=torch.bool)
for i, n in enumerate(lens): pad[i, n:] = True
pad = pad.to(dev)


def t(fn, warmups=2):
    for _ in range(warmups): fn()
    if dev.type == "cuda": torch.cuda.synchronize()
    ts = []
    for _ in range(a.reps):
        s = time.perf_counter(); fn()
        if dev.type == "cuda": torch.cuda.synchronize()
        ts.append(time.perf_counter() - s)
    ts.sort(); return round(ts[len(ts) // 2] * 1e3, 2)


r = {"torch": torch.__version__, "device": str(dev), "layers": L, "tokens": sum(lens)}
r["slow_ms"] = t(lambda: enc(x, src_key_padding_mask=pad))  # train mode, autograd on: the slow path
enc.eval()
with torch.inference_mode():
    enc.enable_nested_tensor = False
    r["fast_dense_ms"] = t(lambda: enc(x, src_key_padding_mask=pad))  # fastpath, every padded position
    enc.enable_nested_tensor = True
    r["fast_nested_ms"] = t(lambda: enc(x, src_key_padding_mask=pad))  # fastpath over nested tensors
    if a.dtype == "bf16":
        enc16, x16 = enc.to(torch.bfloat16), x.to(torch.bfloat16)
        enc16.enable_nested_tensor = False
        r["bf16_dense_ms"] = t(lambda: enc16(x16, src_key_padding_mask=pad))
        enc16.enable_nested_tensor = True
        r["bf16_nested_ms"] = t(lambda: enc16(x16, src_key_padding_mask=pad))
print(json.dumps(r))
