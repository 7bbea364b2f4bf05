#!/usr/bin/python3
"""Time mpi4py's in-place Allreduce (MPI_SUM) of a float32 buffer: the
reference for dist/mpi's BenchmarkAllReduce64MiB (the same size, the same
barrier-then-time loop, the median reported).

    apt-get install -y python3-mpi4py      # built against Debian's Open MPI
    mpirun --allow-run-as-root --bind-to none -np 2 /usr/bin/python3 \
        scripts/bench_mpi_allreduce.py --mib 64 --runs 20

gochat's side (same machine, same mpirun flags):

    go test -c -o /tmp/mpi.test ./dist/mpi
    mpirun --allow-run-as-root --bind-to none -np 2 /tmp/mpi.test \
        -test.run='^$' -test.bench=AllReduce64MiB -test.benchtime=20x

--hugepages backs the buffer with transparent huge pages (mmap +
MADV_HUGEPAGE), as dist/mpi's staging memory and kernels/cpu's large
buffers are; without it numpy's buffer is what malloc returns. --offset
places the buffer that many bytes past a page boundary: the alignment
changes Open MPI's shared-memory allreduce time by ~10% on this machine
(numpy's malloc'd buffer is 16 bytes past one, kernels/cpu's are page
aligned), so compare at the same alignment: --offset 0 with the Go
benchmark's f32, numpy's default (or --offset 16) with its f32-off16B.
"""
import argparse
import mmap
import statistics
import time

import numpy as np
from mpi4py import MPI


def buffer(nbytes, hugepages, offset):
    """A float32 buffer of nbytes: numpy's own (malloc: on glibc 16 bytes past
    a page boundary) when offset is None, else one mmap'd region's bytes from
    offset on (page aligned for 0), optionally with MADV_HUGEPAGE."""
    if offset is None and not hugepages:
        return np.full(nbytes // 4, 1e-3, dtype=np.float32)
    off = offset or 0
    m = mmap.mmap(-1, nbytes + off, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hugepages:
        m.madvise(mmap.MADV_HUGEPAGE)
    a = np.frombuffer(m, dtype=np.uint8)[off:off + nbytes].view(np.float32)
    a[:] = 1e-3
    return a


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=64, help="buffer size in MiB (float32)")
    p.add_argument("--runs", type=int, default=20, help="timed all-reduces")
    p.add_argument("--warmup", type=int, default=1, help="untimed all-reduces first")
    p.add_argument("--hugepages", action="store_true", help="mmap + MADV_HUGEPAGE buffer")
    p.add_argument("--offset", type=int, default=None,
                   help="place the buffer this many bytes past a page boundary (mmap'd)")
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    buf = buffer(args.mib << 20, args.hugepages, args.offset)
    for _ in range(args.warmup):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    times = []
    for _ in range(args.runs):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    if comm.Get_rank() == 0:
        print(f"mpi4py {MPI.Get_library_version().splitlines()[0].strip()}")
        align = buf.ctypes.data % 4096
        print(f"allreduce {args.mib} MiB f32 on {comm.Get_size()} ranks (hugepages={args.hugepages}, "
              f"buffer {align} B past a page boundary): "
              f"median {med * 1e3:.2f} ms over {args.runs} runs, {(args.mib << 20) / med / 1e9:.2f} GB/s "
              f"(min {min(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
