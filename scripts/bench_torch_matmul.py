#!/usr/bin/python3
"""Benchmark PyTorch's torch.matmul (fp32, bf16) on the shapes gochat's CPU GEMM is tuned for.

Run by hand (not by CI) with Debian's python3-torch:

    /usr/bin/python3 scripts/bench_torch_matmul.py [--threads 1,2] [--reps 15] [--dtypes fp32,bf16]

For each shape (M, N, K), variant (nn, nt, tn; op(A) is MxK, op(B) is KxN)
and dtype it materialises the stored layout of the variant (for "t" the
operand is stored transposed and torch.matmul gets a transposed view), warms
up, and prints one JSON line per (shape, variant, dtype, threads) with the
median GFLOP/s:

    {"m": 512, "n": 768, "k": 768, "transpose": "nn", "dtype": "fp32", "threads": 2, "gflops": 150.1}

With dtype bf16 both operands and the output are torch.bfloat16 tensors
(torch.matmul wants one dtype); PyTorch accumulates in fp32. On CPUs with
AVX512-BF16 or AMX-BF16 it runs through oneDNN (mkldnn): set ONEDNN_VERBOSE=1
to see which implementation (e.g. brg:avx512_core_amx_bf16) it picks.
gochat's bf16 GEMM (`gochat bench matmul --dtype bf16`) keeps A in fp32,
rounding it while it packs, and writes fp32 C, so it does a little more
work per call than this.

Each thread count runs in a child process with OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set, so the BLAS library behind
torch honours it as well as torch.set_num_threads.

Debian's python3-torch calls whatever libblas.so.3 the alternatives system
selects; with the reference BLAS (libblas3) that is a few GFLOP/s. To compare
against an optimised BLAS without touching the system, unpack OpenBLAS and
point the loader at it:

    apt-get download libopenblas0-pthread && dpkg-deb -x libopenblas0-pthread_*.deb /tmp/ob
    LD_LIBRARY_PATH=/tmp/ob/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/bin/python3 scripts/bench_torch_matmul.py

Compare with `go test ./kernels/cpu/ -run '^$' -bench BenchmarkGemm`, or
interleave with gochat on a noisy (shared) machine:

    go build -o /tmp/gochat ./cmd/gochat
    /usr/bin/python3 scripts/bench_torch_matmul.py --variants nt --gochat /tmp/gochat --rounds 3

With --gochat, each round times, for each shape and variant back to back,
`gochat bench matmul --dtype D` for each dtype and then torch.matmul for
each dtype, so that both see the same load; lines carry "who": "gochat" or
"torch", and a table of medians over the rounds ends the output.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

import torch

SHAPES = [(512, 768, 768), (512, 3072, 768), (512, 768, 3072), (2048, 2048, 2048)]
VARIANTS = ["nn", "nt", "tn"]


def operands(m, n, k, variant):
    """Returns op(A) [m,k] and op(B) [k,n] as views of the stored layout."""
    ta, tb = variant[0] == "t", variant[1] == "t"
    a = torch.randn(k, m) if ta else torch.randn(m, k)
    b = torch.randn(n, k) if tb else torch.randn(k, n)
    return (a.t() if ta else a), (b.t() if tb else b)


def bench(m, n, k, variant, dtype, reps, min_time):
    a, b = operands(m, n, k, variant)
    if dtype == "bf16":
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)  # keeps the strides
    out = torch.empty(m, n, dtype=a.dtype)
    flops = 2.0 * m * n * k
    # Warm up, and size the inner loop so one sample takes about min_time.
    inner = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b, out=out)
        dt = time.perf_counter() - t0
        if dt >= min_time:
            break
        inner *= 2
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b, out=out)
        dt = time.perf_counter() - t0
        samples.append(flops * inner / dt / 1e9)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--reps", type=int, default=15, help="samples per measurement")
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per sample")
    p.add_argument("--shapes", default="", help="comma-separated MxNxK (default: all)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--gochat", default="", help="a gochat binary to time beside torch (see above)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of measurements (with --gochat)")
    p.add_argument("--gochat-a-bf16", action="store_true",
                   help="gochat's bf16 runs store A in bf16 too (bench matmul --a-bf16), as torch.matmul reads it")
    p.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == 0:
        lines = []
        for threads in [int(t) for t in args.threads.split(",")]:
            env = dict(os.environ)
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                env[var] = str(threads)
            out = subprocess.run([sys.executable, __file__, "--child", str(threads),
                                  "--reps", str(args.reps), "--min-time", str(args.min_time),
                                  "--shapes", args.shapes, "--variants", args.variants,
                                  "--dtypes", args.dtypes, "--gochat", args.gochat,
                                  "--rounds", str(args.rounds)] + (["--gochat-a-bf16"] if args.gochat_a_bf16 else []),
                                 env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
            sys.stdout.write(out)
            lines += [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        if args.gochat:
            print_table(lines)
        return
    threads = args.child
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    dtypes = args.dtypes.split(",")
    for dtype in dtypes:
        if dtype not in ("fp32", "bf16"):
            sys.exit(f"--dtypes: unknown dtype {dtype!r} (want fp32 or bf16)")
    for rnd in range(args.rounds if args.gochat else 1):
        for m, n, k in shapes:
            for variant in args.variants.split(","):
                if args.gochat:
                    for dtype in dtypes:
                        extra = ["--a-bf16"] if args.gochat_a_bf16 and dtype == "bf16" else []
                        out = subprocess.run([args.gochat, "--threads", str(threads), "bench", "matmul",
                                              "--shape", f"{m}x{n}x{k}", "--transpose", variant,
                                              "--dtype", dtype, "--json"] + extra,
                                             check=True, stdout=subprocess.PIPE, text=True).stdout
                        r = json.loads(out)
                        r.update(who="gochat", round=rnd)
                        print(json.dumps(r), flush=True)
                for dtype in dtypes:
                    g = bench(m, n, k, variant, dtype, args.reps, args.min_time)
                    r = {"m": m, "n": n, "k": k, "transpose": variant, "dtype": dtype,
                         "threads": threads, "gflops": round(g, 1)}
                    if args.gochat:
                        r.update(who="torch", round=rnd)
                    print(json.dumps(r), flush=True)


def print_table(lines):
    """Prints the medians over rounds: gochat and torch, fp32 and bf16."""
    cell = collections.defaultdict(list)
    for r in lines:
        cell[(r["threads"], r["m"], r["n"], r["k"], r["transpose"], r["who"], r["dtype"])].append(r["gflops"])
    keys = sorted({k[:5] for k in cell})
    print("threads  shape (MxNxK variant)  gochat fp32  gochat bf16  torch fp32  torch bf16  "
          "(GFLOP/s, medians of rounds)")
    for key in keys:
        def med(who, dtype):
            x = cell.get(key + (who, dtype))
            return f"{statistics.median(x):11.0f}" if x else f"{'-':>11}"
        t, m, n, k, v = key
        print(f"{t:7d}  {f'{m}x{n}x{k} {v}':21s}  {med('gochat', 'fp32')}  {med('gochat', 'bf16')}  "
              f"{med('torch', 'fp32')}  {med('torch', 'bf16')}")


if __name__ == "__main__":
    main()
