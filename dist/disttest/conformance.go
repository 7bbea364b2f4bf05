package disttest

import (
	"fmt"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// ConformanceLengths are the per-rank lengths Conformance checks: empty,
// one, odd, a power of two, and a few thousand (uneven).
var ConformanceLengths = []int{0, 1, 7, 64, 1000, 4097}

// Conformance checks every collective of c, a rank of a group, against the
// sums and concatenations it computes itself from every rank's input:
// F32, BF16 and I32; the lengths of ConformanceLengths; whole buffers and
// views at an offset inside a larger buffer (whose other elements must be
// left as they were); every root of Broadcast; Barrier; and the mistakes
// every rank makes alike (wrong lengths, a missing root), which must be
// errors. Every rank of the group calls it at the same time, on its own
// device. The inputs are multiples of 1/8 (BF16) or integers (F32, I32)
// small enough that every partial sum is exact, so the results do not
// depend on the summation order or on a dtype's rounding after each
// addition (NCCL's BF16 reductions round every partial sum; MPI's order
// is its own).
func Conformance(t *testing.T, c dist.Comm, dev kernels.Device) {
	t.Helper()
	if c.Size() > 16 {
		t.Fatalf("conformance inputs are exact for up to 16 ranks, not %d", c.Size())
	}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.I32} {
		for _, n := range ConformanceLengths {
			for _, view := range []bool{false, true} {
				k := kase{c: c, dev: dev, dt: dt, n: n, view: view}
				k.allReduce(t)
				k.reduceScatter(t)
				k.allGather(t)
				for root := range c.Size() {
					k.broadcast(t, root)
				}
			}
		}
	}
	if err := c.Barrier(); err != nil {
		t.Fatalf("rank %d: barrier: %v", c.Rank(), err)
	}
	conformanceMistakes(t, c, dev)
	if err := c.Barrier(); err != nil {
		t.Fatalf("rank %d: barrier after the mistakes: %v", c.Rank(), err)
	}
}

// conformanceMistakes makes, on every rank, the mistakes a Comm must
// refuse before it communicates.
func conformanceMistakes(t *testing.T, c dist.Comm, dev kernels.Device) {
	t.Helper()
	in, out := alloc(dev, kernels.F32, 4), alloc(dev, kernels.F32, 4*c.Size()+1)
	defer dev.Free(in)
	defer dev.Free(out)
	if err := c.AllGather(out, in); err == nil {
		t.Errorf("rank %d: all-gather of 4 elements into %d accepted", c.Rank(), out.Len())
	}
	if err := c.ReduceScatterSum(in, out); err == nil {
		t.Errorf("rank %d: reduce-scatter of %d elements into 4 accepted", c.Rank(), out.Len())
	}
	if err := c.Broadcast(in, c.Size()); err == nil {
		t.Errorf("rank %d: broadcast from rank %d of %d accepted", c.Rank(), c.Size(), c.Size())
	}
	if err := c.Broadcast(in, -1); err == nil {
		t.Errorf("rank %d: broadcast from rank -1 accepted", c.Rank())
	}
}

// kase is one dtype, length and placement of the conformance checks.
type kase struct {
	c    dist.Comm
	dev  kernels.Device
	dt   kernels.DType
	n    int
	view bool // the buffers are views at an offset inside larger ones
}

// pad is the number of elements around a view.
const pad = 3

// sentinel is the value of the elements around a view.
const sentinel = -99

func (k kase) String() string {
	return fmt.Sprintf("rank %d of %d, %v, %d elements, view %v", k.c.Rank(), k.c.Size(), k.dt, k.n, k.view)
}

// input is rank r's m values for the collective salt: integers in
// [-64, 64) for F32 and I32, multiples of 1/8 in [-2, 2) for BF16 (every
// partial sum over up to 16 ranks has at most 8 significant bits).
func (k kase) input(r, m, salt int) []float32 {
	v := make([]float32, m)
	for i := range v {
		h := uint32(r+1)*2654435761 ^ uint32(i+1)*40503 ^ uint32(salt)*97 ^ uint32(m)
		h ^= h >> 13
		h *= 0x5bd1e995
		h ^= h >> 15
		if k.dt == kernels.BF16 {
			v[i] = float32(int(h%32)-16) / 8
		} else {
			v[i] = float32(int(h%128) - 64)
		}
	}
	return v
}

// buffer returns a buffer of m elements holding v, and the buffer to free:
// a view at offset pad inside a buffer of m+2·pad sentinels when k.view.
func (k kase) buffer(v []float32) (b, root kernels.Buffer) {
	m := len(v)
	if !k.view {
		b = alloc(k.dev, k.dt, m)
		write(k.dev, b, v)
		return b, b
	}
	root = alloc(k.dev, k.dt, m+2*pad)
	all := make([]float32, m+2*pad)
	for i := range all {
		all[i] = sentinel
	}
	copy(all[pad:], v)
	write(k.dev, root, all)
	return root.Slice(pad, m), root
}

// check compares b with want and, for a view, the elements around it with
// the sentinels.
func (k kase) check(t *testing.T, what string, root kernels.Buffer, want []float32) {
	t.Helper()
	got := read(k.dev, root)
	if k.view {
		for i, x := range got {
			if (i < pad || i >= pad+len(want)) && x != sentinel {
				t.Errorf("%s (%v): element %d outside the view changed to %v", what, k, i-pad, x)
				return
			}
		}
		got = got[pad : pad+len(want)]
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s (%v): element %d is %v, want %v", what, k, i, got[i], want[i])
			return
		}
	}
}

// sum is the element-wise sum over ranks of their inputs of m values.
func (k kase) sum(m, salt int) []float32 {
	s := make([]float32, m)
	for r := range k.c.Size() {
		for i, x := range k.input(r, m, salt) {
			s[i] += x
		}
	}
	return s
}

func (k kase) allReduce(t *testing.T) {
	t.Helper()
	b, root := k.buffer(k.input(k.c.Rank(), k.n, 1))
	defer k.dev.Free(root)
	if err := k.c.AllReduceSum(b); err != nil {
		t.Fatalf("all-reduce (%v): %v", k, err)
	}
	k.check(t, "all-reduce", root, k.sum(k.n, 1))
}

func (k kase) reduceScatter(t *testing.T) {
	t.Helper()
	size, r := k.c.Size(), k.c.Rank()
	in, inRoot := k.buffer(k.input(r, size*k.n, 2))
	defer k.dev.Free(inRoot)
	out, outRoot := k.buffer(make([]float32, k.n))
	defer k.dev.Free(outRoot)
	if err := k.c.ReduceScatterSum(out, in); err != nil {
		t.Fatalf("reduce-scatter (%v): %v", k, err)
	}
	k.check(t, "reduce-scatter", outRoot, k.sum(size*k.n, 2)[r*k.n:(r+1)*k.n])
	k.check(t, "reduce-scatter's input", inRoot, k.input(r, size*k.n, 2))
}

func (k kase) allGather(t *testing.T) {
	t.Helper()
	size, r := k.c.Size(), k.c.Rank()
	in, inRoot := k.buffer(k.input(r, k.n, 3))
	defer k.dev.Free(inRoot)
	out, outRoot := k.buffer(make([]float32, size*k.n))
	defer k.dev.Free(outRoot)
	if err := k.c.AllGather(out, in); err != nil {
		t.Fatalf("all-gather (%v): %v", k, err)
	}
	var want []float32
	for q := range size {
		want = append(want, k.input(q, k.n, 3)...)
	}
	k.check(t, "all-gather", outRoot, want)
}

func (k kase) broadcast(t *testing.T, root int) {
	t.Helper()
	b, bRoot := k.buffer(k.input(k.c.Rank(), k.n, 4))
	defer k.dev.Free(bRoot)
	if err := k.c.Broadcast(b, root); err != nil {
		t.Fatalf("broadcast from rank %d (%v): %v", root, k, err)
	}
	k.check(t, fmt.Sprintf("broadcast from rank %d", root), bRoot, k.input(root, k.n, 4))
}

func alloc(dev kernels.Device, dt kernels.DType, n int) kernels.Buffer {
	b, err := dev.Alloc(dt, n)
	if err != nil {
		panic(fmt.Sprintf("disttest: Alloc of %d %v elements: %v", n, dt, err))
	}
	return b
}

// write stores v in b (I32 buffers take the integers).
func write(dev kernels.Device, b kernels.Buffer, v []float32) {
	if b.DType() == kernels.I32 {
		w := make([]int32, len(v))
		for i, x := range v {
			w[i] = int32(x)
		}
		dev.WriteI32(b, w)
		return
	}
	dev.WriteF32(b, v)
}

// read returns b's values as float32.
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
