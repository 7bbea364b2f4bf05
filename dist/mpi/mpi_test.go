package mpi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// workerEnv marks a test binary that TestMPI started under mpirun.
const workerEnv = "GOCHAT_MPI_TEST_WORKER"

// shared is the process's one Comm (MPI is initialized once a process):
// created by the first test or benchmark that asks, closed by TestMain.
var shared struct {
	once sync.Once
	c    *Comm
	err  error
}

func sharedComm(dev kernels.Device, opts Options) (*Comm, error) {
	shared.once.Do(func() { shared.c, shared.err = New(dev, opts) })
	return shared.c, shared.err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// mpirunArgs returns the launcher and the flags it needs, or why MPI is
// not usable here.
func mpirunArgs() ([]string, error) {
	path, err := exec.LookPath("mpirun")
	if err != nil {
		return nil, fmt.Errorf("no mpirun on PATH (%s)", InstallHint)
	}
	sigs := saveSignals() // loading runs the library's constructors in this process
	_, err = openLibrary(sysDL{}, candidates(os.Getenv(EnvLib), Launch{}))
	sigs.restore()
	if err != nil {
		return nil, err
	}
	out, _ := exec.Command(path, "--version").CombinedOutput()
	if strings.Contains(string(out), "Open MPI") || strings.Contains(string(out), "OpenRTE") {
		// As root Open MPI refuses to start without the first flag; with more
		// ranks than cores, without the second; without the third it pins
		// each rank to one core.
		return []string{path, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}, nil
	}
	return []string{path}, nil
}

// TestMPI runs TestMPIWorker under mpirun on 2 and 3 ranks. Without MPI it
// skips, except in CI (CI set), where it fails.
func TestMPI(t *testing.T) {
	if os.Getenv(workerEnv) != "" {
		t.Skip("inside mpirun: TestMPIWorker is the test")
	}
	launcher, err := mpirunArgs()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs MPI for the multi-rank tests: %v", err)
		}
		t.Skipf("MPI not installed: %v", err)
	}
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append(launcher[1:], "-np", fmt.Sprint(np), os.Args[0], "-test.run=^TestMPIWorker$", "-test.v", "-test.count=1")
			cmd := exec.CommandContext(ctx, launcher[0], args...)
			cmd.Env = append(os.Environ(), workerEnv+"=1")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err != nil || strings.Count(out.String(), "--- PASS: TestMPIWorker (") != np {
				t.Fatalf("mpirun -np %d: %v\n%s", np, err, out.String())
			}
			t.Logf("%d ranks passed:\n%s", np, grepLines(out.String(), "mpi_test.go"))
		})
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// workerChunk is the staging memory of the workers: 1 KiB (256 fp32), so
// that the lengths below span one to many chunks on every path.
const workerChunk = 1024

// workerLengths are the per-rank lengths the workers check: empty, below,
// at and above one chunk (256 elements for all-reduce; 256/(Size+1) a
// rank's block for reduce-scatter and all-gather), uneven.
var workerLengths = []int{0, 1, 7, 63, 64, 65, 255, 256, 257, 1000, 3001}

// TestMPIWorker is one rank of TestMPI: every collective, on host slices
// in place and through the staging memory, in F32, BF16 and I32, checked
// against the sum or concatenation this rank computes from every rank's
// input (the inputs are pseudo-random from a seed of rank and length, and
// of a size whose sums are exact in fp32, so the result is exact whatever
// MPI's summation order).
func TestMPIWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("a helper of TestMPI, run under mpirun")
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	c, err := sharedComm(dev, Options{ChunkBytes: workerChunk})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank() == 0 {
		t.Logf("rank 0 of %d: %s; signals restored after MPI_Init: %v", c.Size(), c.Library(), c.RestoredSignals())
	}
	l := DetectLaunch()
	if c.Rank() != l.Rank || c.Size() != l.Size {
		t.Errorf("MPI says rank %d of %d, the launcher %d of %d", c.Rank(), c.Size(), l.Rank, l.Size)
	}
	// Go's signal handlers are in place: a nil dereference is a panic.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a nil dereference did not panic")
			}
		}()
		var p *int
		_ = *p
	}()
	for _, staged := range []bool{false, true} {
		c.staged = staged
		for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.I32} {
			name := fmt.Sprintf("%v/staged=%v", dt, staged)
			t.Run(name, func(t *testing.T) {
				for _, n := range workerLengths {
					checkAllReduce(t, c, dev, dt, n)
					checkReduceScatter(t, c, dev, dt, n)
					checkAllGather(t, c, dev, dt, n)
					for root := range c.Size() {
						checkBroadcast(t, c, dev, dt, n, root)
					}
				}
			})
		}
	}
	c.staged = false
	if err := c.Barrier(); err != nil {
		t.Error(err)
	}
	checkBytes(t, c)
	t.Run("disttest", func(t *testing.T) { disttest.Conformance(t, c, dev) })
	// Mistakes are errors naming the rank, before any MPI call (every rank
	// makes the same one, so none waits for the others).
	in, out := must(dev.Alloc(kernels.F32, 4)), must(dev.Alloc(kernels.F32, 4*c.Size()+1))
	if err := c.AllGather(out, in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("mpi rank %d of %d", c.Rank(), c.Size())) {
		t.Errorf("all-gather into the wrong length: %v", err)
	}
	if err := c.ReduceScatterSum(in, out); err == nil {
		t.Error("reduce-scatter of the wrong length accepted")
	}
	if err := c.Broadcast(in, c.Size()); err == nil {
		t.Error("broadcast from a missing rank accepted")
	}
	if err := c.AllReduceSum(must(dev.Alloc(kernels.F32, 0))); err != nil {
		t.Error(err)
	}
}

// input is rank r's input of n elements for a collective: integers in
// [-64, 64) for F32 and I32; for BF16 values with 8 significant bits in
// ±[2^-6, 8), whose sums over a few ranks are exact in fp32 and need
// rounding back to bf16.
func input(dt kernels.DType, r, n int, salt uint64) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(n)<<8|salt))
	v := make([]float32, n)
	for i := range v {
		if dt == kernels.BF16 {
			x := float32(128+rng.IntN(128)) / 128 // 1.xxxxxxx
			x *= float32(int(1)<<rng.IntN(9)) / 64
			if rng.IntN(2) == 0 {
				x = -x
			}
			v[i] = cpu.FromBF16(cpu.ToBF16(x))
		} else {
			v[i] = float32(rng.IntN(128) - 64)
		}
	}
	return v
}

// load writes v into a new buffer of dt.
func load(dev kernels.Device, dt kernels.DType, v []float32) kernels.Buffer {
	b := must(dev.Alloc(dt, len(v)))
	if dt == kernels.I32 {
		w := make([]int32, len(v))
		for i, x := range v {
			w[i] = int32(x)
		}
		dev.WriteI32(b, w)
		return b
	}
	dev.WriteF32(b, v)
	return b
}

// read returns a buffer's values as float32.
func read(dev kernels.Device, b kernels.Buffer) []float32 {
	v := make([]float32, b.Len())
	if b.DType() == kernels.I32 {
		w := make([]int32, b.Len())
		dev.ReadI32(w, b)
		for i, x := range w {
			v[i] = float32(x)
		}
		return v
	}
	dev.ReadF32(v, b)
	return v
}

// sumOver is the element-wise sum over every rank's input, as dt holds it
// (BF16 summed in fp32, then rounded to nearest even).
func sumOver(dt kernels.DType, size, n int, salt uint64) []float32 {
	s := make([]float32, n)
	for r := range size {
		for i, x := range input(dt, r, n, salt) {
			s[i] += x
		}
	}
	if dt == kernels.BF16 {
		for i := range s {
			s[i] = cpu.FromBF16(cpu.ToBF16(s[i]))
		}
	}
	return s
}

func compare(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: element %d of %d is %v, want %v", what, i, len(want), got[i], want[i])
			return
		}
	}
}

func checkAllReduce(t *testing.T, c *Comm, dev kernels.Device, dt kernels.DType, n int) {
	t.Helper()
	b := load(dev, dt, input(dt, c.Rank(), n, 1))
	if err := c.AllReduceSum(b); err != nil {
		t.Fatal(err)
	}
	compare(t, fmt.Sprintf("all-reduce of %d", n), read(dev, b), sumOver(dt, c.Size(), n, 1))
}

func checkReduceScatter(t *testing.T, c *Comm, dev kernels.Device, dt kernels.DType, n int) {
	t.Helper()
	in := load(dev, dt, input(dt, c.Rank(), c.Size()*n, 2))
	out := must(dev.Alloc(dt, n))
	if err := c.ReduceScatterSum(out, in); err != nil {
		t.Fatal(err)
	}
	want := sumOver(dt, c.Size(), c.Size()*n, 2)[c.Rank()*n : (c.Rank()+1)*n]
	compare(t, fmt.Sprintf("reduce-scatter of %d a rank", n), read(dev, out), want)
}

func checkAllGather(t *testing.T, c *Comm, dev kernels.Device, dt kernels.DType, n int) {
	t.Helper()
	in := load(dev, dt, input(dt, c.Rank(), n, 3))
	out := must(dev.Alloc(dt, c.Size()*n))
	if err := c.AllGather(out, in); err != nil {
		t.Fatal(err)
	}
	var want []float32
	for r := range c.Size() {
		want = append(want, input(dt, r, n, 3)...)
	}
	compare(t, fmt.Sprintf("all-gather of %d a rank", n), read(dev, out), want)
}

func checkBroadcast(t *testing.T, c *Comm, dev kernels.Device, dt kernels.DType, n, root int) {
	t.Helper()
	b := load(dev, dt, input(dt, c.Rank(), n, 4))
	if err := c.Broadcast(b, root); err != nil {
		t.Fatal(err)
	}
	compare(t, fmt.Sprintf("broadcast of %d from rank %d", n, root), read(dev, b), input(dt, root, n, 4))
}

// checkBytes checks the host-byte collectives of the setup of other
// communicators (dist/nccl's unique id): a broadcast from each rank and an
// all-gather of lengths from none to beyond a page.
func checkBytes(t *testing.T, c *Comm) {
	t.Helper()
	fill := func(r, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r*131 + i*7 + n)
		}
		return b
	}
	for _, n := range []int{0, 1, 128, 5000} {
		for root := range c.Size() {
			b := fill(c.Rank(), n)
			if err := c.BroadcastBytes(b, root); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, fill(root, n)) {
				t.Errorf("broadcast of %d bytes from rank %d: wrong bytes", n, root)
			}
		}
		out := make([]byte, c.Size()*n)
		if err := c.AllGatherBytes(out, fill(c.Rank(), n)); err != nil {
			t.Fatal(err)
		}
		for r := range c.Size() {
			if !bytes.Equal(out[r*n:(r+1)*n], fill(r, n)) {
				t.Errorf("all-gather of %d bytes: rank %d's are wrong", n, r)
			}
		}
	}
	if err := c.AllGatherBytes(make([]byte, 3), make([]byte, 2)); err == nil {
		t.Error("all-gather into the wrong length accepted")
	}
	if err := c.BroadcastBytes(make([]byte, 2), -1); err == nil {
		t.Error("byte broadcast from rank -1 accepted")
	}
}

func TestClosedComm(t *testing.T) {
	// A Comm that never reached MPI refuses collectives once closed.
	c := &Comm{closed: true}
	if err := c.AllReduceSum(cpu.F32(make([]float32, 2))); !errors.Is(err, ErrClosed) {
		t.Errorf("all-reduce on a closed Comm: %v", err)
	}
	if err := c.Barrier(); !errors.Is(err, ErrClosed) {
		t.Errorf("barrier on a closed Comm: %v", err)
	}
	if err := c.AllGatherBytes(nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("byte all-gather on a closed Comm: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}
}

// must returns v, panicking on an error: for setup calls (allocations).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
