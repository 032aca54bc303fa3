#!/usr/bin/python3
# The PyTorch peer of xlmr_bench: XLM-R base classification (RoBERTa embeddings, 12 post-LN gelu
# layers of nn.TransformerEncoder with enable_nested_tensor, the classification head on <s>) of the
# same batch of 64 sentences of 5..250 tokens, random weights, eval mode under inference_mode:
# Better Transformer's fastpath over nested tensors. Prints one JSON line.
#   /usr/bin/python3 examples/xlmr_bench_torch.py [threads] [sentences] [reps]
import json, sys, time
import torch, torch.nn as nn

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
sentences = int(sys.argv[2]) if len(sys.argv) > 2 else 64
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
torch.set_num_threads(threads)
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


torch.manual_seed(0)
model = XLMR().eval()
with torch.inference_mode():
    for _ in range(2):
        model(tokens)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        model(tokens)
        times.append(time.perf_counter() - start)
times.sort()
median = times[len(times) // 2]
print(json.dumps({"torch": torch.__version__, "threads": threads, "sentences": sentences, "tokens": sum(lengths),
                  "ms": round(median * 1e3, 1), "tokens_per_s": round(sum(lengths) / median)}))
