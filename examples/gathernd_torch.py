#!/usr/bin/python3
# The PyTorch peer of gathernd_bench (../shared/anchors/gathernd_torch.py, the seed's GatherNd, batch_dims=0):
# 4096 2-d coordinates into f32 [64,128,256], i.e. 4096 rows of 256 floats. Median times of the
# seed's loop (data[tuple(row)]: each coordinate read on the host, a sync per item on a GPU), of
# vectorised indexing, and of a device copy of the same bytes (clone), timed to torch.cuda.synchronize().
#   /usr/bin/python3 examples/gathernd_torch.py [--device cpu|cuda] [--reps 200] [--naive-reps 5] [--json]
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--reps", type=int, default=200)
p.add_argument("--naive-reps", type=int, default=5)
p.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
a = p.parse_args()
dev = torch.device(a.device)
torch.set_num_threads(1)


def naive(data, indices):
    out = []
    flat = indices.reshape(-1, indices.shape[-1])
    for row in flat:
        out.append(data[tuple(row)])
    shape = indices.shape[:-1] + data.shape[indices.shape[-1]:]
    return torch.stack(out).reshape(shape)


def vec(data, indices):
    m = indices.shape[-1]
    idx = torch.split(indices.reshape(-1, m).transpose(0, 1), 1)
    return data[idx].reshape(indices.shape[:-1] + data.shape[m:]).contiguous()


torch.manual_seed(0)
data = torch.rand(64, 128, 256, device=dev)
indices = torch.stack([torch.randint(0, 64, (4096,)), torch.randint(0, 128, (4096,))], -1).to(dev)
assert torch.equal(naive(data, indices), vec(data, indices))
block = data.reshape(-1)[: 4096 * 256]


def t(f, reps):
    f()
    if dev.type == "cuda": torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s = time.perf_counter(); f()
        if dev.type == "cuda": torch.cuda.synchronize()
        ts.append(time.perf_counter() - s)
    ts.sort(); return ts[len(ts) // 2]


tn, tv, tc = t(lambda: naive(data, indices), a.naive_reps), t(lambda: vec(data, indices), a.reps), t(block.clone, a.reps)
nbytes = 4096 * 256 * 4 * 2  # rows read plus rows written
print(json.dumps({"torch": torch.__version__, "device": str(dev), "naive_ms": round(tn * 1e3, 3),
                  "vec_us": round(tv * 1e6, 1), "gbs": round(nbytes / tv / 1e9, 2), "copy_us": round(tc * 1e6, 1),
                  "copy_gbs": round(nbytes / tc / 1e9, 2), "bytes": nbytes}))
