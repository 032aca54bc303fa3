#!/usr/bin/python3
# The torch peer of `dist_sgd --elastic` under torchrun's elastic agent (scripts/elastic_trials.sh
# runs both on the same test cluster): DDP (gloo) over the distributed tutorial's Net on
# Fashion-MNIST, SGD lr 0.01 momentum 0.5, one global batch of 128 per step from one seeded order
# (rank r of w trains on rows [128r/w, 128(r+1)/w), its loss weighted by its share), checkpoints
# per node every --checkpoint-every steps; on a restart the newest step any rank holds is sent to
# the others (broadcast_object_list), as dist_sgd --elastic does. Rank 0 prints "step N loss L".
#
#   /usr/bin/python3 -m torch.distributed.run --nnodes 1:3 --nproc_per_node 1 --rdzv_backend c10d \
#       --rdzv_endpoint 10.0.0.1:29500 --max_restarts 9 examples/dist_sgd_elastic_torch.py --checkpoint-dir DIR
#       [--pg-timeout 10]
import argparse, glob, gzip, os, time, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument('--data', default='/usr/share/datasets/fashion-mnist')
ap.add_argument('--epochs', type=int, default=1)
ap.add_argument('--subset', type=int, default=0)
ap.add_argument('--seed', type=int, default=1234)
ap.add_argument('--checkpoint-dir', required=True)
ap.add_argument('--checkpoint-every', type=int, default=20)
# gloo's wait for a peer (torch's default 30 minutes): with a link cut, how long a rank waits
# before it fails and the agent restarts the workers.
ap.add_argument('--pg-timeout', type=float, default=1800)
args = ap.parse_args()

def load(kind):
    with gzip.open(f'{args.data}/{kind}-images-idx3-ubyte.gz') as f: x = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(f'{args.data}/{kind}-labels-idx1-ubyte.gz') as f: y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.tensor(x.reshape(-1, 1, 28, 28), dtype=torch.float32) / 255.
    return (x - 0.1307) / 0.3081, torch.tensor(y, dtype=torch.long)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, 5); self.conv2 = nn.Conv2d(10, 20, 5)
        self.drop = nn.Dropout2d(); self.fc1 = nn.Linear(320, 50); self.fc2 = nn.Linear(50, 10)
    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)

torch.set_num_threads(1)
import datetime
dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=args.pg_timeout))
rank, size = dist.get_rank(), dist.get_world_size()
x, y = load('train')
if args.subset: x, y = x[:args.subset], y[:args.subset]
torch.manual_seed(args.seed)
model = Net()
ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
mine = os.path.join(args.checkpoint_dir, f'rank-{rank}')
os.makedirs(mine, exist_ok=True)
def steps_held(): return sorted(int(p.rsplit('-', 1)[1][:-3]) for p in glob.glob(f'{mine}/step-*.pt'))

# The newest checkpoint any rank holds, from the lowest rank holding it.
held = steps_held(); own = held[-1] if held else -1
newest = torch.tensor([own]); dist.all_reduce(newest, op=dist.ReduceOp.MAX); newest = int(newest)
step, epoch0, batch0 = 0, 0, 0
if newest >= 0:
    holder = torch.tensor([rank if own == newest else size]); dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [torch.load(f'{mine}/step-{newest}.pt') if rank == int(holder) else None]
    dist.broadcast_object_list(box, src=int(holder))
    state = box[0]
    if own != newest: torch.save(state, f'{mine}/step-{newest}.pt')
    model.load_state_dict(state['model']); opt.load_state_dict(state['optimizer'])
    step, epoch0, batch0 = state['step'], state['epoch'], state['batch']
    if rank == 0: print(f'resumed from step {step}', flush=True)
if rank == 0: print(f'start world={size} restart={os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}', flush=True)

t0 = time.time()
n = len(x); batches = (n + 127) // 128
for epoch in range(epoch0, args.epochs):
    order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch))
    for b in range(batch0 if epoch == epoch0 else 0, batches):
        rows = order[b * 128:(b + 1) * 128]; m = len(rows)
        lo, hi = m * rank // size, m * (rank + 1) // size
        torch.manual_seed(args.seed * 1000003 + step * 1009 + rank)  # dropout, per step and rank
        opt.zero_grad()
        loss = F.nll_loss(ddp(x[rows[lo:hi]]), y[rows[lo:hi]])
        (loss * ((hi - lo) * size / m)).backward()
        opt.step(); step += 1
        if rank == 0: print(f'step {step} loss {loss.item():.4f}', flush=True)
        if step % args.checkpoint_every == 0:
            torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict(), 'step': step,
                        'epoch': epoch if b + 1 < batches else epoch + 1, 'batch': (b + 1) % batches}, f'{mine}/step-{step}.pt.tmp')
            os.replace(f'{mine}/step-{step}.pt.tmp', f'{mine}/step-{step}.pt')
            for old in steps_held()[:-2]: os.remove(f'{mine}/step-{old}.pt')
if rank == 0:
    xt, yt = load('t10k'); model.eval()
    with torch.no_grad(): acc = (model(xt).argmax(1) == yt).float().mean().item()
    print(f'{{"world":{size},"steps":{step},"test_accuracy":{acc:.4f},"train_s":{time.time() - t0:.2f}}}', flush=True)
dist.barrier()
