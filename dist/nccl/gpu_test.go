package nccl

import (
	"os"
	"testing"

	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

// Tests that need a GPU and the real NCCL: they skip without them, and
// fail instead with GOCHAT_CUDA_REQUIRE=1 (scripts/gpu-check.sh).

// mpiWorkerEnv marks a test binary that gpu-check.sh started under mpirun
// (one rank a GPU).
const mpiWorkerEnv = "GOCHAT_NCCL_MPI_WORKER"

func requireGPU(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("GOCHAT_CUDA_REQUIRE") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func openGPU(t *testing.T, ordinal int) *cuda.Device {
	t.Helper()
	d, err := cuda.New(cuda.Options{Ordinal: ordinal})
	if err != nil {
		requireGPU(t, "no usable GPU %d: %v", ordinal, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close of %s: %v", d.Name(), err)
		}
	})
	return d
}

func newGPUComm(t *testing.T, d *cuda.Device, boot Bootstrap) *Comm {
	t.Helper()
	c, err := New(d, boot, Options{Libs: cuda.NCCLCandidates(cuda.SearchEnvFrom(os.Getenv))})
	if err != nil {
		requireGPU(t, "NCCL on %s: %v", d.Name(), err)
	}
	t.Logf("rank %d of %d on %s: %s", c.Rank(), c.Size(), d.Name(), c.Library())
	return c
}

// TestGPUOneRank builds a one-rank NCCL communicator on GPU 0 (the
// bootstrap in-process) and runs the suite every Comm passes, then NCCL's
// in-place forms, the barrier and Close.
func TestGPUOneRank(t *testing.T) {
	if os.Getenv(mpiWorkerEnv) != "" {
		t.Skip("inside mpirun: TestGPUMPIWorker is the test")
	}
	d := openGPU(t, 0)
	boot := &fakeBoot{rank: 0, size: 1, rv: newRendezvous(1), events: new([]string)}
	c := newGPUComm(t, d, boot)
	disttest.Conformance(t, c, d)
	checkInPlace(t, c, d)
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !boot.closed {
		t.Error("Close left the bootstrap open")
	}
	if s := d.MemStats(); s.Live != 0 {
		t.Errorf("%d bytes live after Close", s.Live)
	}
}

// TestGPUMPIWorker is one rank of an MPI job on a node with a GPU a rank
// (gpu-check.sh: mpirun -np N with N GPUs): cuda:LOCAL_RANK, NCCL
// bootstrapped over MPI, the suite every Comm passes.
func TestGPUMPIWorker(t *testing.T) {
	if os.Getenv(mpiWorkerEnv) == "" {
		t.Skip("run under mpirun by scripts/gpu-check.sh")
	}
	l := mpi.DetectLaunch()
	if l.LocalRank < 0 {
		t.Fatalf("the launcher (%s) announced no local rank", l.By)
	}
	d := openGPU(t, l.LocalRank)
	m, err := mpi.New(d, mpi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newGPUComm(t, d, m)
	disttest.Conformance(t, c, d)
	checkInPlace(t, c, d)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkInPlace runs NCCL's in-place reduce-scatter and all-gather on the
// device and checks the results.
func checkInPlace(t *testing.T, c *Comm, d kernels.Device) {
	t.Helper()
	const n = 1000
	size, r := c.Size(), c.Rank()
	buf, err := d.Alloc(kernels.F32, size*n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(buf)
	v := make([]float32, size*n)
	for i := range v {
		v[i] = float32(i%97 + r)
	}
	d.WriteF32(buf, v)
	if err := c.ReduceScatterSum(buf.Slice(r*n, n), buf); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, size*n)
	d.ReadF32(got, buf)
	for i := range n {
		j := r*n + i
		if want := float32(size*(j%97) + size*(size-1)/2); got[j] != want {
			t.Fatalf("in-place reduce-scatter: element %d is %v, want %v", j, got[j], want)
		}
	}
	d.WriteF32(buf.Slice(r*n, n), v[:n])
	if err := c.AllGather(buf, buf.Slice(r*n, n)); err != nil {
		t.Fatal(err)
	}
	d.ReadF32(got, buf)
	for q := range size {
		for i := range n {
			if want := float32(i%97 + q); got[q*n+i] != want {
				t.Fatalf("in-place all-gather: element %d of rank %d is %v, want %v", i, q, got[q*n+i], want)
			}
		}
	}
}
