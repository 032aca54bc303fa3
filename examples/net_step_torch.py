#!/usr/bin/python3
# The PyTorch peer of train_bench: the distributed tutorial's Net (anchors/dist_sgd_torch.py), one thread, a batch of
# 64: median milliseconds of a training step (zero_grad, forward, nll_loss, backward, SGD step with
# momentum 0.5) and of an inference forward; and the cost of a small op (add of two f32[16]) with
# and without the tape (on the cpu). --device cuda runs the step and the forward on the GPU, timed
# until the device is done (torch.cuda.synchronize), cuDNN autotuned, TF32 off. Prints one JSON line.
#   /usr/bin/python3 examples/net_step_torch.py [steps] [--device cpu|cuda] [--json]
import argparse, json, time
import torch, torch.nn as nn, torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("steps", nargs="?", type=int, default=60)
parser.add_argument("--device", default="cpu")
parser.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always one JSON line")
args = parser.parse_args()
steps, device = args.steps, torch.device(args.device)
torch.set_num_threads(1)
if device.type == "cuda":
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, 5); self.conv2 = nn.Conv2d(10, 20, 5)
        self.conv2_drop = nn.Dropout2d(); self.fc1 = nn.Linear(320, 50); self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def finish():
    if device.type == "cuda": torch.cuda.synchronize()


def median_ms(fn, runs):
    for _ in range(3): fn()
    finish()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); finish(); times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


torch.manual_seed(1)
net = Net().to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
x, y = (torch.rand(64, 1, 28, 28) * 2 - 1).to(device), (torch.arange(64) % 10).to(device)


def step():
    opt.zero_grad(); F.nll_loss(net(x), y).backward(); opt.step()


def infer():
    with torch.no_grad(): net(x)


def per_call_ns(fn, calls=20000):
    return median_ms(lambda: [fn() for _ in range(calls)], 5) * 1e6 / calls


a, b = torch.rand(16), torch.rand(16)
ga, gb = a.clone().requires_grad_(), b.clone().requires_grad_()
result = {"device": str(device), "step_ms": median_ms(step, steps)}
net.eval(); result["forward_ms"] = median_ms(infer, steps); net.train()
device = torch.device("cpu")  # the small-op figures are the tape's cost on the cpu
result["add16_ns"] = per_call_ns(lambda: torch.add(a, b))
result["add16_taped_ns"] = per_call_ns(lambda: torch.add(ga, gb))
print(json.dumps(result))
