#!/usr/bin/python3
# The PyTorch peer of lstm_ensemble (../shared/anchors/lstm_ensemble_torch.py, the TorchScript fork/wait
# tutorial's ensemble): 4 bidirectional LSTMs over T=50 B=50 C=1024, outputs summed, under no_grad.
# Median ms of a forward pass: serial, TorchScript fork of the members (fork_ensemble), and PyTorch's
# best on a GPU, each member one nn.LSTM(bidirectional=True) call (cuDNN runs both directions at
# once). On cuda: cuDNN autotuned, TF32 off (an f32 comparison), timed to torch.cuda.synchronize().
#   /usr/bin/python3 examples/lstm_ensemble_torch.py [--device cpu|cuda] [--models 4] [--threads 2] [--reps 5] [--json]
import argparse, json, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--models", type=int, default=4)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--T", type=int, default=50); p.add_argument("--B", type=int, default=50); p.add_argument("--C", type=int, default=1024)
p.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
a = p.parse_args()
dev, T, B, C, N = torch.device(a.device), a.T, a.B, a.C, a.models
torch.set_num_threads(a.threads)
if dev.type == "cuda":
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


class BiSerial(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell_f = torch.nn.LSTM(input_size=C, hidden_size=C)
        self.cell_b = torch.nn.LSTM(input_size=C, hidden_size=C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output_f, _ = self.cell_f(x)
        output_b, _ = self.cell_b(torch.flip(x, dims=[0]))
        return torch.cat((output_f, torch.flip(output_b, dims=[0])), dim=2)


class BiFused(torch.nn.Module):  # the same function, one cuDNN call for both directions
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(input_size=C, hidden_size=C, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


class EnsSerial(torch.nn.Module):
    def __init__(self, cls):
        super().__init__()
        self.models = torch.nn.ModuleList([cls() for _ in range(N)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(x) for m in self.models]).sum(dim=0)


class EnsFork(EnsSerial):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        futs = [torch.jit.fork(m, x) for m in self.models]
        return torch.stack([torch.jit.wait(f) for f in futs]).sum(dim=0)


def finish():
    if dev.type == "cuda": torch.cuda.synchronize()


def bench(mod):
    m = torch.jit.script(mod.to(dev))
    x = torch.rand(T, B, C, device=dev)
    with torch.no_grad():
        for _ in range(2): m(x)
        finish()
        ts = []
        for _ in range(a.reps):
            s = time.perf_counter(); m(x); finish(); ts.append(time.perf_counter() - s)
    ts.sort(); return ts[len(ts) // 2] * 1e3


torch.manual_seed(0)
r = {"torch": torch.__version__, "device": str(dev), "models": N, "T": T, "B": B, "C": C,
     "serial_ms": bench(EnsSerial(BiSerial)), "fork_ensemble_ms": bench(EnsFork(BiSerial)),
     "bidirectional_ms": bench(EnsSerial(BiFused))}
r["best_ms"] = min(r["serial_ms"], r["fork_ensemble_ms"], r["bidirectional_ms"])
print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}))
