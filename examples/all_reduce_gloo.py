#!/usr/bin/python3
# Gloo's all_reduce (torch.distributed, gloo backend, 1 thread) as one rank of a job started by a
# launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (troupe launch, torchrun): the
# peer of all_reduce_bench across hosts. One JSON line per size on rank 0, as all_reduce_bench --json.
#
#   troupe launch --nnodes 2 --node-rank R --master HOST:PORT --nproc 1 -- examples/all_reduce_gloo.py
# Across namespaces set GLOO_SOCKET_IFNAME to the interface between them (eth0 in netns_cluster.sh).
import json, os, sys, time
import torch, torch.distributed as dist

sizes = [int(a) for a in sys.argv[1:]] or [4, 4096, 1 << 20, 16 << 20, 64 << 20]
torch.set_num_threads(1)
dist.init_process_group('gloo')
rank, size = dist.get_rank(), dist.get_world_size()
for nbytes in sizes:  # as all_reduce_bench: 2 warm-up calls, a barrier, each call timed, the median
    t = torch.ones(max(1, nbytes // 4))
    reps = max(3, min(200, int(2e8 // max(nbytes, 1))))
    for _ in range(2): dist.all_reduce(t)
    dist.barrier()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - start)
    median = sorted(times)[reps // 2]
    if rank == 0:
        busbw = nbytes / median * 2 * (size - 1) / size / 1e9
        print(json.dumps({"peer": "gloo", "ranks": size, "bytes": nbytes, "time_us": round(median * 1e6, 1),
                          "busbw_gbs": round(busbw, 4)}), flush=True)
dist.destroy_process_group()
