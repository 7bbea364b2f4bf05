package nccl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
)

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// The NCCL Comm over the fake passes the suite every Comm passes, on 1 to
// 4 ranks, and ends its communicator and the bootstrap on Close.
func TestConformance(t *testing.T) {
	for _, size := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			envs := newRanks(t, size)
			noErrors(t, run(envs, func(c *Comm, e *rankEnv) error {
				disttest.Conformance(t, c, e.dev)
				return nil
			}))
			for r, e := range envs {
				if !slices.Equal(e.nccl.ended, []string{"ncclCommFinalize", "ncclCommDestroy"}) || !e.boot.closed {
					t.Errorf("rank %d: Close called %v, bootstrap closed %v", r, e.nccl.ended, e.boot.closed)
				}
				if len(e.nccl.calls) == 0 {
					t.Errorf("rank %d made no NCCL calls", r)
				}
				if e.dev.polls < 2 {
					t.Errorf("rank %d: the barrier's wait polled the stream %d times", r, e.dev.polls)
				}
			}
		})
	}
}

// The setup runs in order: the exchange of what each rank loaded, rank 0's
// unique id, its broadcast, then ncclCommInitRank with the job's size, the
// rank's own rank and the id rank 0 made, on the rank's GPU.
func TestBootstrapOrder(t *testing.T) {
	envs := newRanks(t, 3)
	noErrors(t, run(envs, func(c *Comm, e *rankEnv) error {
		if c.Rank() != e.boot.rank || c.Size() != 3 {
			return fmt.Errorf("rank %d of %d", c.Rank(), c.Size())
		}
		if !strings.Contains(c.Library(), "NCCL 2.27.3") {
			return fmt.Errorf("Library() = %q", c.Library())
		}
		return nil
	}))
	for r, e := range envs {
		want := []string{fmt.Sprintf("all-gather %d bytes", recLen)}
		if r == 0 {
			want = append(want, "getUniqueId")
		}
		want = append(want, fmt.Sprintf("broadcast %d bytes from 0", idLen),
			fmt.Sprintf("commInitRank(3, %d, id 1) on cuda:%d", r, r), "bootstrap closed")
		if got := *e.dev.events; !slices.Equal(got, want) {
			t.Errorf("rank %d:\n got %q\nwant %q", r, got, want)
		}
	}
}

// The C arguments of each collective: dtype, count (a rank's block for
// reduce-scatter and all-gather), the addresses of views, root, the
// stream; and NCCL's in-place forms.
func TestArguments(t *testing.T) {
	const n = 5
	envs := newRanks(t, 2)
	noErrors(t, run(envs, func(c *Comm, e *rankEnv) error {
		d, f := e.dev, e.nccl
		r := c.Rank()
		alloc := func(dt kernels.DType, m int) kernels.Buffer {
			b, err := d.Alloc(dt, m)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		addr := func(b kernels.Buffer) uintptr {
			p, err := d.Addr(b)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		last := func() fakeCall { return f.calls[len(f.calls)-1] }

		big := alloc(kernels.BF16, 3*n)
		view := big.Slice(3, n)
		if err := c.AllReduceSum(view); err != nil {
			return err
		}
		if k := last(); k.fn != "ncclAllReduce" || k.send != addr(big)+6 || k.recv != k.send || k.count != n || k.dt != ncclBfloat16 || k.op != ncclSum || k.strm != d.stream() {
			t.Errorf("all-reduce of a bf16 view: %+v (buffer at %#x)", k, addr(big))
		}

		in, out := alloc(kernels.F32, 2*n), alloc(kernels.F32, n)
		if err := c.ReduceScatterSum(out, in); err != nil {
			return err
		}
		if k := last(); k.fn != "ncclReduceScatter" || k.send != addr(in) || k.recv != addr(out) || k.count != n || k.dt != ncclFloat32 {
			t.Errorf("reduce-scatter: %+v", k)
		}
		ig, og := alloc(kernels.I32, n), alloc(kernels.I32, 2*n)
		if err := c.AllGather(og, ig); err != nil {
			return err
		}
		if k := last(); k.fn != "ncclAllGather" || k.send != addr(ig) || k.recv != addr(og) || k.count != n || k.dt != ncclInt32 {
			t.Errorf("all-gather: %+v", k)
		}
		if err := c.Broadcast(view, 1); err != nil {
			return err
		}
		if k := last(); k.fn != "ncclBroadcast" || k.root != 1 || k.send != addr(view) || k.recv != k.send {
			t.Errorf("broadcast: %+v", k)
		}

		// In place: reduce-scatter into this rank's block of its input, all-
		// gather from this rank's block of the output.
		vals := make([]float32, 2*n)
		for i := range vals {
			vals[i] = float32(10*r + i)
		}
		d.WriteF32(in, vals)
		if err := c.ReduceScatterSum(in.Slice(r*n, n), in); err != nil {
			return err
		}
		if k := last(); k.recv != k.send+uintptr(4*r*n) {
			t.Errorf("in-place reduce-scatter: %+v", k)
		}
		got := make([]float32, 2*n)
		d.ReadF32(got, in)
		for i := range n {
			if want := float32(10 + 2*(r*n+i)); got[r*n+i] != want {
				t.Errorf("rank %d: in-place reduce-scatter element %d = %v, want %v", r, i, got[r*n+i], want)
				break
			}
		}
		d.WriteF32(in.Slice(r*n, n), vals[:n])
		if err := c.AllGather(in, in.Slice(r*n, n)); err != nil {
			return err
		}
		if k := last(); k.send != k.recv+uintptr(4*r*n) {
			t.Errorf("in-place all-gather: %+v", k)
		}
		d.ReadF32(got, in)
		for q := range 2 {
			for i := range n {
				if want := float32(10*q + i); got[q*n+i] != want {
					t.Errorf("rank %d: in-place all-gather element %d of rank %d = %v, want %v", r, i, q, got[q*n+i], want)
				}
			}
		}

		// Other overlaps are refused before NCCL is called (every rank makes
		// the same mistake).
		calls := len(f.calls)
		if err := c.ReduceScatterSum(in.Slice(1, n), in); err == nil || !strings.Contains(err.Error(), "in-place form") {
			t.Errorf("overlapping reduce-scatter: %v", err)
		}
		if err := c.AllGather(in, in.Slice(1, n)); err == nil || !strings.Contains(err.Error(), "in-place form") {
			t.Errorf("overlapping all-gather: %v", err)
		}
		if len(f.calls) != calls {
			t.Errorf("a refused collective reached NCCL: %+v", f.calls[calls:])
		}
		return nil
	}))
}

// Errors name the rank, the collective and NCCL's result.
func TestErrors(t *testing.T) {
	envs := newRanks(t, 1)
	e := envs[0]
	noErrors(t, run(envs, func(c *Comm, _ *rankEnv) error {
		b, _ := e.dev.Alloc(kernels.F32, 4)
		e.nccl.fail["ncclAllReduce"] = ncclInvalidUsage
		err := c.AllReduceSum(b)
		var ne *Error
		if !errors.As(err, &ne) || ne.Name != "ncclInvalidUsage" || ne.Func != "ncclAllReduce" {
			t.Errorf("not an *Error of ncclAllReduce: %v", err)
		}
		for _, want := range []string{"nccl rank 0 of 1", "all-reduce of 4 f32 elements", "ncclAllReduce: ncclInvalidUsage (5): invalid usage", "fake: the last error"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
		delete(e.nccl.fail, "ncclAllReduce")

		// A queued collective that failed later: the asynchronous error.
		e.nccl.async = 6
		if err := c.Barrier(); err == nil || !strings.Contains(err.Error(), "ncclRemoteError (6)") || !strings.Contains(err.Error(), "barrier") {
			t.Errorf("barrier with an asynchronous error: %v", err)
		}
		if err := c.Broadcast(b, 0); err == nil || !strings.Contains(err.Error(), "a queued collective failed") {
			t.Errorf("broadcast with an asynchronous error: %v", err)
		}
		e.nccl.async = 0

		// Buffers that are not device memory, dtypes NCCL does not move.
		if err := c.AllReduceSum(notDevice{}); err == nil || !strings.Contains(err.Error(), "not device memory") {
			t.Errorf("all-reduce of host memory: %v", err)
		}
		if err := c.AllReduceSum(f16{}); err == nil || !strings.Contains(err.Error(), "only F32, BF16 and I32") {
			t.Errorf("all-reduce of f16: %v", err)
		}
		e.dev.Free(b)
		return nil
	}))
	// After Close every call is refused.
	c := &Comm{closed: true}
	if err := c.Barrier(); !errors.Is(err, ErrClosed) {
		t.Errorf("barrier after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}
}

type notDevice struct{}

func (notDevice) DType() kernels.DType            { return kernels.F32 }
func (notDevice) Len() int                        { return 4 }
func (b notDevice) Slice(int, int) kernels.Buffer { return b }

type f16 struct{ notDevice }

func (f16) DType() kernels.DType { return kernels.F16 }

// Setup failures every rank sees are one error on every rank, with
// AllRanks set; a failure of ncclCommInitRank on one rank is that rank's.
func TestSetupErrors(t *testing.T) {
	cases := []struct {
		name  string
		size  int
		setup func(envs []*rankEnv)
		want  string
		all   bool
	}{
		{"rank without NCCL", 3, func(envs []*rankEnv) {
			envs[1].loadErr = errors.New("nccl: no usable libnccl (libnccl.so.2: cannot open shared object file)")
		}, "NCCL did not load on 1 of 3 ranks (rank 1: nccl: no usable libnccl (libnccl.so.2: cannot open", true},
		{"versions differ", 2, func(envs []*rankEnv) { envs[1].version = 21805 },
			"rank 0 loaded NCCL 2.27.3, rank 1 NCCL 2.18.5", true},
		{"two ranks on one GPU", 3, func(envs []*rankEnv) { envs[2].dev.ordinal = 0 },
			"ranks 0 and 2 both use cuda:0 on", true},
		{"no unique id", 2, func(envs []*rankEnv) { envs[0].nccl.fail["ncclGetUniqueId"] = 2 },
			"rank 0's ncclGetUniqueId failed: ncclSystemError", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			envs := newRanks(t, tc.size)
			tc.setup(envs)
			for r, err := range run(envs, func(*Comm, *rankEnv) error { return nil }) {
				var se *SetupError
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &se) || se.AllRanks != tc.all {
					t.Errorf("rank %d: %v, want an error saying %q (all ranks %v)", r, err, tc.want, tc.all)
				}
				if !strings.Contains(fmt.Sprint(err), fmt.Sprintf("nccl rank %d of %d", r, tc.size)) {
					t.Errorf("rank %d: the error does not name the rank: %v", r, err)
				}
			}
		})
	}
	t.Run("init fails on one rank", func(t *testing.T) {
		envs := newRanks(t, 2)
		envs[1].nccl.fail["ncclCommInitRank"] = ncclInvalidUsage
		errs := run(envs, func(*Comm, *rankEnv) error { return nil })
		var se *SetupError
		if err := errs[1]; err == nil || !strings.Contains(err.Error(), "ncclCommInitRank: ncclInvalidUsage") || !strings.Contains(err.Error(), "on cuda:1") || errors.As(err, &se) {
			t.Errorf("rank 1: %v", err)
		}
	})
}

func TestNames(t *testing.T) {
	if got := result(5).String(); got != "ncclInvalidUsage" {
		t.Errorf("result 5 is %s", got)
	}
	if got := result(42).String(); got != "ncclResult_t(42)" {
		t.Errorf("result 42 is %s", got)
	}
	for code, want := range map[int]string{2804: "2.8.4", 21805: "2.18.5", 22703: "2.27.3"} {
		if got := versionString(code); got != want {
			t.Errorf("versionString(%d) = %s, want %s", code, got, want)
		}
	}
	if versionCode(2804) >= minVersion || versionCode(21003) < minVersion {
		t.Error("versionCode: 2.8.4 must be too old, 2.10.3 new enough")
	}
	for dt, want := range map[kernels.DType]dataType{kernels.F32: 7, kernels.BF16: 9, kernels.I32: 2} {
		if got, ok := ncclDataType(dt); !ok || got != want {
			t.Errorf("ncclDataType(%v) = %d, want %d", dt, got, want)
		}
	}
	if _, ok := ncclDataType(kernels.F16); ok {
		t.Error("F16 mapped")
	}
}
