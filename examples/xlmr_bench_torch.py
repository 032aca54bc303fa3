#!/usr/bin/python3
# The PyTorch peer of xlmr_bench: XLM-R base classification (RoBERTa embeddings, 12 post-LN gelu
# layers of nn.TransformerEncoder with enable_nested_tensor, the classification head on <s>) of the
# same batch of 64 sentences of 5..250 tokens, random weights, eval mode under inference_mode:
# Better Transformer's fastpath over nested tensors, in f32 and with the model in bf16 (as xlmr_bench's
# bf16 GEMMs). --device cuda: the model and the tokens on the GPU, TF32 off (the f32 figure is f32),
# timed to torch.cuda.synchronize(). Prints one JSON line. --profile: one more bf16 run under
# torch.profiler, its ops by device time on stderr (beside xlmr_bench --profile's).
#   /usr/bin/python3 examples/xlmr_bench_torch.py [threads] [sentences] [reps] [--device cpu|cuda] [--profile] [--json]
import argparse, copy, json, sys, time
import torch, torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("threads", nargs="?", type=int, default=1)
parser.add_argument("sentences", nargs="?", type=int, default=64)
parser.add_argument("reps", nargs="?", type=int, default=3)
parser.add_argument("--device", default="cpu")
parser.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
parser.add_argument("--profile", action="store_true", help="one more bf16 run profiled: its op table on stderr")
args = parser.parse_args()
threads, sentences, reps, device = args.threads, args.sentences, args.reps, torch.device(args.device)
torch.set_num_threads(threads)
if device.type == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
V, D, H, F, LAYERS, PAD = 250002, 768, 12, 3072, 12, 1

state = 1234
def lcg():  # Knuth's MMIX LCG, stepped as xlmr_bench.cpp steps it
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
    return state >> 33

lengths = [5 + lcg() % 246 for _ in range(sentences)]
S = max(lengths)
tokens = torch.full((sentences, S), PAD, dtype=torch.long)
for i, L in enumerate(lengths):
    tokens[i, 0] = 0
    for j in range(1, L - 1):
        tokens[i, j] = 4 + lcg() % (V - 4)
    tokens[i, L - 1] = 2


class XLMR(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D, padding_idx=PAD)
        self.pos = nn.Embedding(514, D, padding_idx=PAD)
        self.norm = nn.LayerNorm(D)
        layer = nn.TransformerEncoderLayer(D, H, F, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=True)
        self.dense, self.out_proj = nn.Linear(D, D), nn.Linear(D, 2)

    def forward(self, tokens):
        real = tokens.ne(PAD)
        positions = torch.cumsum(real, dim=1) * real + PAD
        x = self.norm(self.tok(tokens) + self.pos(positions))
        x = self.encoder(x, src_key_padding_mask=~real)
        return self.out_proj(torch.tanh(self.dense(x[:, 0])))


def median_seconds(model, tokens):
    with torch.inference_mode():
        for _ in range(2):
            model(tokens)
        if device.type == "cuda": torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            model(tokens)
            if device.type == "cuda": torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


torch.manual_seed(0)
model = XLMR().eval().to(device)
tokens = tokens.to(device)
median = median_seconds(model, tokens)
model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
bf16 = median_seconds(model_bf16, tokens)
if args.profile:
    from torch.profiler import profile, ProfilerActivity
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.inference_mode(), profile(activities=activities) as prof:
        model_bf16(tokens)
        if device.type == "cuda": torch.cuda.synchronize()
    averages = prof.key_averages()
    for key in (["device_time_total", "cuda_time_total"] if device.type == "cuda" else []) + ["cpu_time_total"]:
        try:
            table = averages.table(sort_by=key, row_limit=30)
            break
        except Exception:  # a sort key this PyTorch does not know
            continue
    print("xlmr_bench_torch: one bf16 run, ops by " + key + "\n" + table, file=sys.stderr)
print(json.dumps({"torch": torch.__version__, "device": str(device), "threads": threads, "sentences": sentences,
                  "tokens": sum(lengths), "ms": round(median * 1e3, 1), "tokens_per_s": round(sum(lengths) / median),
                  "bf16_ms": round(bf16 * 1e3, 1), "bf16_tokens_per_s": round(sum(lengths) / bf16)}))
