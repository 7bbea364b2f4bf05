package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// fakeGPU is a gpu without a GPU: device memory is host bytes, and every
// launch and GEMM is recorded and checked against the kernels' parameter
// lists parsed from cu/*.cu (count and kinds), the launch limits and the
// allocations (every pointer argument must point into one). It runs in Go
// the few kernels the GEMM path uses (the bf16 rounding, the k = 0
// scaling, the bias sums) and the GEMM itself, so the host-side GEMM
// logic (row-major to cuBLAS's column-major, leading dimensions, the bf16
// operand conversion) is tested end to end; other kernels only record.
type fakeGPU struct {
	t   *testing.T
	mem *fakeMemory
	buf map[uintptr][]byte // backing bytes of each allocation
	sig map[string]kernelSig

	launches []launchRec
	gemms    []gemmCall
	pinned   map[unsafe.Pointer][]byte // page-locked host memory (pinned_test.go)

	// vm, when set, is the fake's virtual memory management (vmm_test.go):
	// every copy, memset, launch argument and GEMM operand that touches a
	// reserved range must touch mapped chunks only, and an unmap must
	// follow a sync. unmapped, when set, is told of a violation instead
	// of failing the test at once. queued is work queued since the last
	// sync.
	vm       *fakeVMM
	unmapped func(msg string)
	queued   bool
}

type launchRec struct {
	k           kernel
	grid, block dim3
	args        []kernelArg
}

func newFakeGPU(t *testing.T, capacity int64) *fakeGPU {
	return &fakeGPU{t: t, mem: newFakeMemory(capacity), buf: map[uintptr][]byte{}, sig: parseKernels(t, programSource())}
}

func newFakeDevice(t *testing.T, capacity int64) (*Device, *fakeGPU) {
	g := newFakeGPU(t, capacity)
	d, err := newDevice(g, "cuda:0 (fake, sm_90)", 90, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

func (g *fakeGPU) alloc(n int64) (uintptr, error) {
	p, err := g.mem.alloc(n)
	if err == nil {
		g.buf[p] = make([]byte, n)
	}
	return p, err
}

func (g *fakeGPU) free(p uintptr) error {
	delete(g.buf, p)
	return g.mem.free(p)
}

func (g *fakeGPU) memInfo() (int64, int64, error) { return g.mem.memInfo() }

// bytes returns the backing bytes [p, p+n) or fails the test.
func (g *fakeGPU) bytes(p uintptr, n int) []byte {
	if b, ok := g.vm.bytes(p, n); ok {
		return b
	}
	for base, b := range g.buf {
		if p >= base && p+uintptr(n) <= base+uintptr(len(b)) {
			return b[p-base : p-base+uintptr(n)]
		}
	}
	g.t.Fatalf("device range %#x+%d is in no allocation", p, n)
	return nil
}

// inside reports whether p points into an allocation.
func (g *fakeGPU) inside(p uintptr) bool {
	if g.vm.reserved(p) {
		return true
	}
	for base, b := range g.buf {
		if p >= base && p < base+uintptr(len(b)) {
			return true
		}
	}
	return false
}

func (g *fakeGPU) htod(dst uintptr, src unsafe.Pointer, n int) error {
	if n > 0 {
		copy(g.bytes(dst, n), unsafe.Slice((*byte)(src), n))
	}
	return nil
}

func (g *fakeGPU) dtoh(dst unsafe.Pointer, src uintptr, n int) error {
	if n > 0 {
		copy(unsafe.Slice((*byte)(dst), n), g.bytes(src, n))
	}
	return nil
}

func (g *fakeGPU) dtod(dst, src uintptr, n int) error {
	g.queued = true
	if n > 0 {
		copy(g.bytes(dst, n), g.bytes(src, n))
	}
	return nil
}

func (g *fakeGPU) memsetZero(dst uintptr, n int) error {
	g.queued = true
	if n > 0 {
		clear(g.bytes(dst, n))
	}
	return nil
}

func (g *fakeGPU) sync() error { g.queued = false; return nil }

// fakeStream is the stream handle the fake hands to OnStream.
const fakeStream = 0x5712ea

func (g *fakeGPU) query() (bool, error)                        { return true, nil }
func (g *fakeGPU) onStream(f func(stream uintptr) error) error { return f(fakeStream) }
func (g *fakeGPU) close() error                                { return nil }

func (g *fakeGPU) launch(k kernel, grid, block dim3, args []kernelArg) error {
	name := kernelNames[k]
	sig, ok := g.sig[name]
	if !ok {
		g.t.Fatalf("launch of %s, which cu/*.cu does not define", name)
	}
	if len(args) != len(sig.params) {
		g.t.Fatalf("%s: %d arguments, the kernel takes %d: %s", name, len(args), len(sig.params), sig.decl)
	}
	for i, a := range args {
		if a.kind != sig.params[i] {
			g.t.Fatalf("%s: argument %d is %v, the kernel's parameter is %v: %s", name, i, a.kind, sig.params[i], sig.decl)
		}
		if a.kind == argPtr && a.bits != 0 && !g.inside(uintptr(a.bits)) {
			g.t.Fatalf("%s: argument %d (%#x) points into no allocation", name, i, a.bits)
		}
		if a.kind == argPtr && a.bits != 0 {
			g.vm.bytes(uintptr(a.bits), int(max(a.span, 1))) // mapped, where reserved
		}
	}
	threads := block[0] * block[1] * block[2]
	if threads == 0 || threads > 1024 || threads%32 != 0 {
		g.t.Fatalf("%s: a block of %v threads (the reductions need a multiple of 32, at most 1024)", name, block)
	}
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > math.MaxInt32 || grid[1] > 65535 || grid[2] > 65535 {
		g.t.Fatalf("%s: a grid of %v", name, grid)
	}
	g.launches = append(g.launches, launchRec{k, grid, block, append([]kernelArg(nil), args...)})
	g.queued = true
	switch k {
	case kF32ToBF16:
		dst, src, n := uintptr(args[0].bits), uintptr(args[1].bits), int(args[2].bits)
		for i := range n {
			binary.LittleEndian.PutUint16(g.bytes(dst+uintptr(2*i), 2), toBF16(g.f32At(src, i)))
		}
	case kBF16ToF32:
		dst, src, n := uintptr(args[0].bits), uintptr(args[1].bits), int(args[2].bits)
		for i := range n {
			g.setF32(dst, i, math.Float32frombits(uint32(binary.LittleEndian.Uint16(g.bytes(src+uintptr(2*i), 2)))<<16))
		}
	case kScaleMatrix:
		c, m, n, ldc := uintptr(args[0].bits), int(int32(args[1].bits)), int(int32(args[2].bits)), int(int32(args[3].bits))
		beta := math.Float32frombits(uint32(args[4].bits))
		for i := range m {
			for j := range n {
				v := float32(0)
				if beta != 0 {
					v = beta * g.f32At(c, i*ldc+j)
				}
				g.setF32(c, i*ldc+j, v)
			}
		}
	case kColsumAdd:
		db, dy, n, oc := uintptr(args[0].bits), uintptr(args[1].bits), int(int32(args[2].bits)), int(int32(args[3].bits))
		for j := range oc {
			s := 0.0
			for i := range n {
				s += float64(g.f32At(dy, i*oc+j))
			}
			g.setF32(db, j, g.f32At(db, j)+float32(s))
		}
	case kAddBias:
		out, bias, bf, n, c := uintptr(args[0].bits), uintptr(args[1].bits), args[2].bits != 0, int(args[3].bits), int(int32(args[4].bits))
		for i := range n * c {
			var b float32
			if bf {
				b = math.Float32frombits(uint32(binary.LittleEndian.Uint16(g.bytes(bias+uintptr(2*(i%c)), 2))) << 16)
			} else {
				b = g.f32At(bias, i%c)
			}
			g.setF32(out, i, g.f32At(out, i)+b)
		}
	}
	return nil
}

func (g *fakeGPU) f32At(p uintptr, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(g.bytes(p+uintptr(4*i), 4)))
}

func (g *fakeGPU) setF32(p uintptr, i int, v float32) {
	binary.LittleEndian.PutUint32(g.bytes(p+uintptr(4*i), 4), math.Float32bits(v))
}

// elem reads element i of a column-major operand of cuBLAS type typ.
func (g *fakeGPU) elem(p uintptr, typ, i int) float64 {
	if typ == cudaR16BF {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(g.bytes(p+uintptr(2*i), 2))) << 16))
	}
	return float64(g.f32At(p, i))
}

// gemm checks cuBLAS's argument rules and computes the column-major
// C = alpha·op(A)·op(B) + beta·C in float64.
func (g *fakeGPU) gemm(c gemmCall) error {
	g.gemms = append(g.gemms, c)
	g.queued = true
	rowsA, rowsB := c.m, c.k // stored rows (column-major leading dimension) for op N
	if c.transA == cublasOpT {
		rowsA = c.k
	}
	if c.transB == cublasOpT {
		rowsB = c.n
	}
	if c.m <= 0 || c.n <= 0 || c.k <= 0 || c.lda < max(1, rowsA) || c.ldb < max(1, rowsB) || c.ldc < max(1, c.m) {
		g.t.Fatalf("cublasGemmEx would refuse %+v", c)
	}
	if c.aType != c.bType || (c.aType != cudaR32F && c.aType != cudaR16BF) {
		g.t.Fatalf("cublasGemmEx with operand types %d and %d", c.aType, c.bType)
	}
	a := func(i, l int) float64 { // op(A)[i, l]
		if c.transA == cublasOpT {
			return g.elem(c.a, c.aType, l+i*c.lda)
		}
		return g.elem(c.a, c.aType, i+l*c.lda)
	}
	b := func(l, j int) float64 {
		if c.transB == cublasOpT {
			return g.elem(c.b, c.bType, j+l*c.ldb)
		}
		return g.elem(c.b, c.bType, l+j*c.ldb)
	}
	for i := range c.m {
		for j := range c.n {
			s := 0.0
			for l := range c.k {
				s += a(i, l) * b(l, j)
			}
			v := float64(c.alpha) * s
			if c.beta != 0 {
				v += float64(c.beta) * float64(g.f32At(c.c, i+j*c.ldc))
			}
			g.setF32(c.c, i+j*c.ldc, float32(v))
		}
	}
	return nil
}

// upload returns a device buffer holding x as dt.
func upload(t *testing.T, d *Device, dt kernels.DType, x []float32) kernels.Buffer {
	t.Helper()
	b, err := d.Alloc(dt, len(x))
	if err != nil {
		t.Fatal(err)
	}
	d.WriteF32(b, x)
	return b
}

func read(d *Device, b kernels.Buffer) []float32 {
	out := make([]float32, b.Len())
	d.ReadF32(out, b)
	return out
}

func mustPanic(t *testing.T, name, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic, want one saying %q", name, want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("%s: panic %q, want it to say %q", name, msg, want)
		}
	}()
	f()
}
