"""The peer of lane_bench's op_us and cuda_bench's troupe_mul: what one small op costs PyTorch's
caller on the GPU (mul of f32[256] by f32[1], queued on an idle stream; median of 2,000 calls).

    python3 examples/enqueue_torch.py --json
"""
import argparse
import json
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    x = torch.ones(256, device="cuda")
    factor = torch.full((1,), 2.0, device="cuda")
    for _ in range(100):
        y = x * factor
    torch.cuda.synchronize()
    times = []
    for _ in range(args.calls):
        start = time.perf_counter()
        y = x * factor
        times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    del y
    median = statistics.median(times)
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                          "torch_mul_us": round(median, 2)}))
    else:
        print(f"torch mul f32[256] on {torch.cuda.get_device_name()}: {median:.2f} us (median of {args.calls})")


if __name__ == "__main__":
    main()
