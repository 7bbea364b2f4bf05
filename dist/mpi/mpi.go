// Package mpi is a dist.Comm over MPI, loaded at run time: the binary is
// built without cgo and runs without MPI installed; only a process that an
// MPI launcher started (mpirun -np N gochat ...) dlopens the library.
//
// # Library
//
// GOCHAT_MPI_LIB names the library when set; otherwise Open MPI
// (libmpi.so.40) then MPICH (libmpich.so.12, and the MPICH-ABI
// libmpi.so.12 of Intel MPI and MVAPICH) are tried on the usual paths,
// MPICH's first when an MPICH-family launcher started the process. The ABI
// is Open MPI's when the library exports ompi_mpi_comm_world and MPICH's
// otherwise (confirmed from MPI_Get_library_version); the handle values of
// each are the ones of its mpi.h, kept as integers, never as Go pointers.
//
// # Threads and memory
//
// Every MPI call is made by one goroutine locked to its OS thread, which
// initialized MPI at MPI_THREAD_FUNNELED; the collectives hand their work
// to it and wait. Go's signal handlers are saved before dlopen and put
// back after MPI_Init and MPI_Finalize (MPI libraries and UCX replace
// them). Buffers that are Go slices of host memory (kernels/cpu) are
// passed to MPI directly, chunk by chunk; any other buffer, and every BF16
// reduction, goes through off-heap staging memory (mmap, MADV_HUGEPAGE) of
// Options.ChunkBytes with Device.ReadF32/WriteF32 (ReadI32/WriteI32), so
// the memory a collective adds is bounded whatever the buffer's size.
//
// # Precision
//
// F32 is reduced with MPI_FLOAT and MPI_SUM; BF16 is widened to fp32
// (exact), reduced in fp32 and rounded back to nearest even; I32 with
// MPI_INT32_T. The summation order is MPI's, so sums over three or more
// ranks may differ from a sequential sum by rounding.
//
// # Launching
//
// Open MPI: mpirun --bind-to none -np N gochat ... (add --allow-run-as-root
// as root and --oversubscribe for more ranks than cores; without
// --bind-to none each rank is pinned to one core). MPICH: mpiexec -np N.
package mpi

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// DefaultChunkBytes is the staging memory of a Comm: 64 MiB.
const DefaultChunkBytes = 64 << 20

// Options configure New.
type Options struct {
	// Lib is the MPI library to dlopen, a path or a soname. Empty means
	// $GOCHAT_MPI_LIB, else discovery (see the package comment).
	Lib string
	// ChunkBytes is the staging memory in bytes (0: DefaultChunkBytes);
	// a collective moves at most this many bytes per MPI call. Every rank
	// must use the same value: it decides how a collective is split into
	// MPI calls.
	ChunkBytes int
	// Staged copies every buffer through the staging memory, host slices
	// too (for tests of the staged path).
	Staged bool
}

// Comm is a dist.Comm over MPI_COMM_WORLD. Its methods are safe for use by
// several goroutines (collectives run one at a time), but every rank must
// call the collectives in the same order. Close it to finalize MPI.
type Comm struct {
	dev        kernels.Device
	lib        *library
	launch     Launch
	version    string
	rank, size int
	chunkBytes int
	staged     bool
	restored   []int // signals whose handlers MPI had replaced and New put back

	mu     sync.Mutex // one collective at a time: they share the staging memory
	closed bool
	stage  offHeap // chunkBytes of staging, mapped on first use
	f32    []float32
	i32    []int32

	// The MPI thread: reqs carries work to it, resp the results back;
	// done is closed when it has exited.
	reqs    chan func() error
	resp    chan error
	done    chan struct{}
	scratch offHeap // what MPI writes back: ints, strings, counts and displacements
}

var _ dist.Comm = (*Comm)(nil)

// Scratch layout: out-parameters, the string buffer, then the counts and
// displacements of Allgatherv (size ints each).
const (
	scratchInts   = 0    // int32 out-parameters: [0] provided/flag, [1] rank, [2] size, [3] length
	scratchStr    = 4096 // strings: MPI_MAX_LIBRARY_VERSION_STRING is 8192 in MPICH
	scratchStrLen = 8192
	scratchCounts = scratchStr + scratchStrLen
	minChunkBytes = 64
	maxChunkBytes = 1 << 30 // 256 Mi elements: MPI counts stay C ints
	abortFallback = 10 * time.Second
)

// FromEnv returns the group this process was launched into: an MPI Comm
// (a *Comm, which the caller closes; it implements io.Closer) when an MPI
// launcher started the process, dist.Single{Dev: dev} otherwise, so that
// gochat outside mpirun runs as one rank without loading MPI.
func FromEnv(dev kernels.Device) (dist.Comm, error) {
	if !DetectLaunch().Launched() {
		return dist.Single{Dev: dev}, nil
	}
	return New(dev, Options{})
}

// New loads MPI, initializes it at MPI_THREAD_FUNNELED on a dedicated
// locked OS thread, and returns MPI_COMM_WORLD. dev copies non-host
// buffers through the staging memory (it may be nil when every buffer is a
// Go slice of host memory and no BF16 is reduced). A process initializes
// MPI once: after Close, New fails.
func New(dev kernels.Device, opts Options) (*Comm, error) {
	chunk := opts.ChunkBytes
	if chunk == 0 {
		chunk = DefaultChunkBytes
	}
	if chunk < minChunkBytes || chunk > maxChunkBytes {
		return nil, fmt.Errorf("mpi: staging chunk of %d bytes (%d to %d)", chunk, minChunkBytes, maxChunkBytes)
	}
	lib := opts.Lib
	if lib == "" {
		lib = os.Getenv(EnvLib)
	}
	c := &Comm{
		dev: dev, launch: DetectLaunch(), chunkBytes: chunk &^ 3, staged: opts.Staged,
		reqs: make(chan func() error), resp: make(chan error, 1), done: make(chan struct{}),
	}
	ready := make(chan error)
	go c.thread(candidates(lib, c.launch), ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	if l := c.launch; l.Size >= 0 && l.Size != c.size {
		err := fmt.Errorf("mpi: %s announced %d ranks but %s (%s) sees %d: the launcher and the library are different MPI implementations; set %s to the library of the mpirun in use",
			l.By, l.Size, c.lib.path, c.lib.flavour, c.size, EnvLib)
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// thread is the MPI thread: it loads and initializes MPI, reports on
// ready, then runs the work sent on reqs until a request finalizes MPI.
// The goroutine stays locked to its OS thread and the thread exits with
// it: no other goroutine ever runs on a thread that holds MPI state.
func (c *Comm) thread(cands []string, ready chan<- error) {
	runtime.LockOSThread()
	defer close(c.done)
	sigs := saveSignals()
	err := c.initialize(cands)
	c.restored = sigs.restore()
	if err != nil {
		_ = c.scratch.unmap()
		ready <- err
		return
	}
	ready <- nil
	for {
		f := <-c.reqs
		if f == nil { // Close: finalize and exit
			code := call(c.lib.finalize)
			sigs.restore()
			c.resp <- c.check("MPI_Finalize", code)
			return
		}
		c.resp <- f()
	}
}

// initialize loads the library and runs MPI_Init_thread (on the MPI thread).
func (c *Comm) initialize(cands []string) error {
	lib, err := openLibrary(sysDL{}, cands)
	if err != nil {
		return err
	}
	c.lib = lib
	if c.scratch, err = mapOffHeap(scratchCounts + 1<<16); err != nil {
		return fmt.Errorf("mpi: %w", err)
	}
	ints := c.scratchInts()
	ints[3] = scratchStrLen
	if code := call(lib.getLibraryVersion, c.scratch.addr(scratchStr), c.scratch.addr(scratchInts+12)); code == mpiSuccess {
		c.version = c.scratchString(int(ints[3]))
	}
	if err := checkVersion(lib.flavour, c.version); err != nil {
		return fmt.Errorf("mpi: %s: %w", lib.path, err)
	}
	if code := call(lib.initialized, c.scratch.addr(scratchInts)); code != mpiSuccess || ints[0] != 0 {
		return fmt.Errorf("mpi: %s: MPI is already initialized in this process (one Comm a process; MPI cannot be initialized again after MPI_Finalize)", lib.path)
	}
	if code := call(lib.finalized, c.scratch.addr(scratchInts)); code != mpiSuccess || ints[0] != 0 {
		return fmt.Errorf("mpi: %s: MPI was finalized in this process and cannot be initialized again", lib.path)
	}
	// MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)
	if code := call(lib.initThread, 0, 0, threadFunneled, c.scratch.addr(scratchInts)); code != mpiSuccess {
		return fmt.Errorf("mpi: %s: MPI_Init_thread failed with code %d", lib.path, code)
	}
	if p := ints[0]; p < threadFunneled {
		call(lib.finalize)
		return fmt.Errorf("mpi: %s provides thread level %d, below MPI_THREAD_FUNNELED (1)", lib.path, p)
	}
	// Errors come back as codes (wrapped with the rank) instead of
	// MPI_ERRORS_ARE_FATAL's abort without context.
	if err := c.check("MPI_Comm_set_errhandler", call(lib.commSetErrhandler, lib.h.commWorld, lib.h.errorsReturn)); err != nil {
		return fmt.Errorf("mpi: %w", err)
	}
	if err := c.check("MPI_Comm_rank", call(lib.commRank, lib.h.commWorld, c.scratch.addr(scratchInts+4))); err != nil {
		return fmt.Errorf("mpi: %w", err)
	}
	if err := c.check("MPI_Comm_size", call(lib.commSize, lib.h.commWorld, c.scratch.addr(scratchInts+8))); err != nil {
		return fmt.Errorf("mpi: %w", err)
	}
	c.rank, c.size = int(ints[1]), int(ints[2])
	if c.size*8 > 1<<16 {
		return fmt.Errorf("mpi: %d ranks: more than this package's %d", c.size, 1<<16/8)
	}
	return nil
}

func (c *Comm) scratchInts() []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(&c.scratch.mem[scratchInts])), 4)
}

// scratchString is the string MPI wrote at scratchStr, n bytes or up to
// its NUL.
func (c *Comm) scratchString(n int) string {
	b := c.scratch.mem[scratchStr : scratchStr+max(0, min(n, scratchStrLen))]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Error is a failed MPI call.
type Error struct {
	Func string // the MPI function, e.g. "MPI_Allreduce"
	Code int    // its return code
	Msg  string // MPI_Error_string of the code
}

func (e *Error) Error() string { return fmt.Sprintf("%s failed: %s (code %d)", e.Func, e.Msg, e.Code) }

// check turns an MPI return code into an *Error (on the MPI thread).
func (c *Comm) check(fn string, code int32) error {
	if code == mpiSuccess {
		return nil
	}
	e := &Error{Func: fn, Code: int(code)}
	ints := c.scratchInts()
	ints[3] = 0
	if call(c.lib.errorString, uintptr(code), c.scratch.addr(scratchStr), c.scratch.addr(scratchInts+12)) == mpiSuccess {
		e.Msg = c.scratchString(int(ints[3]))
	}
	return e
}

// onThread runs f on the MPI thread and returns its error. The caller
// holds c.mu.
func (c *Comm) onThread(f func() error) error {
	c.reqs <- f
	return <-c.resp
}

// Rank implements dist.Comm.
func (c *Comm) Rank() int { return c.rank }

// Size implements dist.Comm.
func (c *Comm) Size() int { return c.size }

// Library describes the loaded MPI: path, ABI and version string.
func (c *Comm) Library() string {
	v, _, _ := strings.Cut(strings.TrimSpace(c.version), "\n")
	return fmt.Sprintf("%s (%s: %s)", c.lib.path, c.lib.flavour, strings.TrimSpace(v))
}

// RestoredSignals lists the signals whose Go handlers MPI had replaced
// while loading or initializing, and New put back.
func (c *Comm) RestoredSignals() []int { return c.restored }

// errorf wraps an error with the rank.
func (c *Comm) errorf(format string, args ...any) error {
	return fmt.Errorf("mpi rank %d of %d: %w", c.rank, c.size, fmt.Errorf(format, args...))
}

// ErrClosed is the error of a collective on a closed Comm.
var ErrClosed = errors.New("communicator is closed")

// Close finalizes MPI (MPI_Finalize, collective: every rank closes) and
// unmaps the staging memory. Later collectives fail; Close again is a
// no-op.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.onThread(nil)
	<-c.done
	_ = c.stage.unmap()
	c.f32, c.i32 = nil, nil
	_ = c.scratch.unmap()
	if err != nil {
		return c.errorf("%w", err)
	}
	return nil
}

// Abort ends every rank of the job with code (MPI_Abort on
// MPI_COMM_WORLD; mpirun exits with it) and does not return. Call it on a
// fatal error so that no other rank waits forever in a collective this
// rank will never join. When the MPI thread is busy in a collective that
// does not finish within 10 s, or MPI is finalized, the process exits with
// code and the launcher ends the other ranks.
func (c *Comm) Abort(code int) {
	abort := func() error {
		call(c.lib.abort, c.lib.h.commWorld, uintptr(code))
		os.Exit(code)
		return nil
	}
	select {
	case c.reqs <- abort:
		time.Sleep(abortFallback) // MPI_Abort returns no more than os.Exit does
	case <-c.done:
	case <-time.After(abortFallback):
	}
	os.Exit(code)
}

// begin locks the communicator for one collective.
func (c *Comm) begin() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// stageMem maps the staging memory on first use and sets its f32 and i32
// views (the same bytes). Staging needs the Device.
func (c *Comm) stageMem() error {
	if c.dev == nil {
		return errors.New("a buffer that is not a host slice, or a BF16 reduction, needs a Device to copy through the staging memory; New was given none")
	}
	if c.stage.mem != nil {
		return nil
	}
	m, err := mapOffHeap(c.chunkBytes)
	if err != nil {
		return err
	}
	c.stage = m
	c.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&m.mem[0])), c.chunkBytes/4)
	c.i32 = unsafe.Slice((*int32)(unsafe.Pointer(&m.mem[0])), c.chunkBytes/4)
	return nil
}

// stageElems is the staging memory in 4-byte elements.
func (c *Comm) stageElems() int { return c.chunkBytes / 4 }

// hostPointer returns the address of a buffer's first element when the
// buffer is a Go slice of host memory (kernels/cpu's F32, BF16, I32) whose
// element size matches its DType, so MPI can read and write it in place;
// ok is false for any other buffer (device memory). The slice's backing
// array is on Go's heap, which does not move; the call that receives the
// address converts it in its argument list, which keeps the array alive.
func hostPointer(b kernels.Buffer) (p unsafe.Pointer, ok bool) {
	v := reflect.ValueOf(b)
	if v.Kind() != reflect.Slice || v.Len() != b.Len() || v.Len() == 0 {
		return nil, false
	}
	want := b.DType().Size()
	switch v.Type().Elem().Kind() {
	case reflect.Float32, reflect.Int32, reflect.Uint32:
		ok = want == 4
	case reflect.Uint16, reflect.Int16:
		ok = want == 2
	}
	if !ok || int(v.Type().Elem().Size()) != want {
		return nil, false
	}
	return v.UnsafePointer(), true
}

// direct returns the addresses of buffers MPI may use in place: all of
// them host slices and the Comm not forced to stage.
func (c *Comm) direct(bufs ...kernels.Buffer) ([]unsafe.Pointer, bool) {
	if c.staged {
		return nil, false
	}
	ps := make([]unsafe.Pointer, len(bufs))
	for i, b := range bufs {
		p, ok := hostPointer(b)
		if !ok {
			return nil, false
		}
		ps[i] = p
	}
	return ps, true
}

// stagedType is the MPI datatype of a dtype in the staging memory (BF16
// travels widened to fp32).
func (c *Comm) stagedType(dt kernels.DType) uintptr {
	if dt == kernels.I32 {
		return c.lib.h.int32
	}
	return c.lib.h.float
}

// directType is the MPI datatype of a dtype in a host slice (BF16 as its
// 16 bits, for the collectives that only move data).
func (c *Comm) directType(dt kernels.DType) uintptr {
	switch dt {
	case kernels.I32:
		return c.lib.h.int32
	case kernels.BF16:
		return c.lib.h.uint16
	}
	return c.lib.h.float
}

// stageIn copies src (k elements) into the staging memory at element off.
func (c *Comm) stageIn(off int, src kernels.Buffer) {
	k := src.Len()
	if src.DType() == kernels.I32 {
		c.dev.ReadI32(c.i32[off:off+k], src)
		return
	}
	c.dev.ReadF32(c.f32[off:off+k], src)
}

// stageOut copies k = dst.Len() elements at element off of the staging
// memory into dst (BF16 rounded to nearest even).
func (c *Comm) stageOut(dst kernels.Buffer, off int) {
	k := dst.Len()
	if dst.DType() == kernels.I32 {
		c.dev.WriteI32(dst, c.i32[off:off+k])
		return
	}
	c.dev.WriteF32(dst, c.f32[off:off+k])
}

// checkDType refuses the element types a collective does not move.
func checkDType(op string, dt kernels.DType) error {
	switch dt {
	case kernels.F32, kernels.BF16, kernels.I32:
		return nil
	}
	return fmt.Errorf("%s of %v: only F32, BF16 and I32 are supported", op, dt)
}

// chunks calls f for the consecutive chunks [off, off+k) of n elements,
// per elements each (the last one shorter), and stops at the first error.
func chunks(n, per int, f func(off, k int) error) error {
	for off := 0; off < n; off += per {
		if err := f(off, min(per, n-off)); err != nil {
			return err
		}
	}
	return nil
}

// perChunk is how many elements of each rank's block a staged collective
// moves per MPI call when the staging memory of stage elements holds
// blocks such runs: 1 for all-reduce and broadcast (in place), size+1 for
// reduce-scatter and all-gather (size runs for the full side, one for the
// rank's own).
func perChunk(stage, blocks int) int { return stage / blocks }

// AllReduceSum implements dist.Comm: buf (F32, BF16 or I32, n elements,
// the same n on every rank) becomes the element-wise sum over ranks. F32
// host slices are reduced in place (MPI_IN_PLACE); BF16 is widened into
// the staging memory, summed in fp32 and rounded back to nearest even.
func (c *Comm) AllReduceSum(buf kernels.Buffer) error {
	n, dt := buf.Len(), buf.DType()
	if err := checkDType("all-reduce", dt); err != nil {
		return c.errorf("%w", err)
	}
	if err := c.begin(); err != nil {
		return c.errorf("all-reduce: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	ps, direct := c.direct(buf)
	if direct && dt == kernels.BF16 {
		direct = false
	}
	if !direct {
		if err := c.stageMem(); err != nil {
			return c.errorf("all-reduce: %w", err)
		}
	}
	h := c.lib.h
	err := chunks(n, perChunk(c.stageElems(), 1), func(off, k int) error {
		if direct {
			p := unsafe.Add(ps[0], off*dt.Size())
			return c.onThread(func() error {
				return c.check("MPI_Allreduce", call(c.lib.allreduce, h.inPlace, uintptr(p), uintptr(k), c.directType(dt), h.sum, h.commWorld))
			})
		}
		c.stageIn(0, buf.Slice(off, k))
		if err := c.onThread(func() error {
			return c.check("MPI_Allreduce", call(c.lib.allreduce, h.inPlace, c.stage.addr(0), uintptr(k), c.stagedType(dt), h.sum, h.commWorld))
		}); err != nil {
			return err
		}
		c.stageOut(buf.Slice(off, k), 0)
		return nil
	})
	if err != nil {
		return c.errorf("all-reduce of %d %v elements: %w", n, dt, err)
	}
	return nil
}

// ReduceScatterSum implements dist.Comm: in (Size·n elements, F32, BF16
// or I32) is summed over ranks and rank r's out (n elements, in's DType)
// receives elements [r·n, (r+1)·n) of the sum. A host-slice F32 or I32
// collective that fits one chunk runs in place; larger ones are staged in
// chunks of each rank's block.
func (c *Comm) ReduceScatterSum(out, in kernels.Buffer) error {
	n, dt := out.Len(), out.DType()
	if err := checkDType("reduce-scatter", dt); err != nil {
		return c.errorf("%w", err)
	}
	if in.DType() != dt || in.Len() != c.size*n {
		return c.errorf("reduce-scatter of %d %v elements into %d %v on %d ranks (want %d·out)", in.Len(), in.DType(), n, dt, c.size, c.size)
	}
	if err := c.begin(); err != nil {
		return c.errorf("reduce-scatter: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	per := perChunk(c.stageElems(), c.size+1)
	if per == 0 {
		return c.errorf("reduce-scatter: a staging chunk of %d bytes is too small for %d ranks", c.chunkBytes, c.size)
	}
	ps, direct := c.direct(out, in)
	direct = direct && dt != kernels.BF16 && n <= per
	if !direct {
		if err := c.stageMem(); err != nil {
			return c.errorf("reduce-scatter: %w", err)
		}
	}
	h := c.lib.h
	err := chunks(n, per, func(off, k int) error {
		if direct { // one chunk: off == 0, k == n
			return c.onThread(func() error {
				return c.check("MPI_Reduce_scatter_block", call(c.lib.reduceScatterBlock, uintptr(ps[1]), uintptr(ps[0]), uintptr(k), c.directType(dt), h.sum, h.commWorld))
			})
		}
		// send: the size runs [r·n+off, r·n+off+k) side by side at 0;
		// recv: k elements at size·per.
		for r := range c.size {
			c.stageIn(r*k, in.Slice(r*n+off, k))
		}
		recv := c.size * per
		if err := c.onThread(func() error {
			return c.check("MPI_Reduce_scatter_block", call(c.lib.reduceScatterBlock, c.stage.addr(0), c.stage.addr(recv*4), uintptr(k), c.stagedType(dt), h.sum, h.commWorld))
		}); err != nil {
			return err
		}
		c.stageOut(out.Slice(off, k), recv)
		return nil
	})
	if err != nil {
		return c.errorf("reduce-scatter of %d %v elements a rank: %w", n, dt, err)
	}
	return nil
}

// setCounts writes Allgatherv's recvcounts (k for every rank) and displs
// (r·stride) into the scratch memory and returns their addresses.
func (c *Comm) setCounts(k, stride int) (counts, displs uintptr) {
	a := unsafe.Slice((*int32)(unsafe.Pointer(&c.scratch.mem[scratchCounts])), 2*c.size)
	for r := range c.size {
		a[r] = int32(k)
		a[c.size+r] = int32(r * stride)
	}
	return c.scratch.addr(scratchCounts), c.scratch.addr(scratchCounts + 4*c.size)
}

// AllGather implements dist.Comm: out (Size·n elements) receives every
// rank's in (n elements, F32, BF16 or I32, out's DType) in rank order.
// Host slices are gathered in place chunk by chunk (MPI_Allgatherv with
// displacements r·n; BF16 as its 16 bits); other buffers through the
// staging memory (BF16 widened to fp32, exact).
func (c *Comm) AllGather(out, in kernels.Buffer) error {
	n, dt := in.Len(), in.DType()
	if err := checkDType("all-gather", dt); err != nil {
		return c.errorf("%w", err)
	}
	if out.DType() != dt || out.Len() != c.size*n {
		return c.errorf("all-gather of %d %v elements into %d %v on %d ranks (want %d·in)", n, dt, out.Len(), out.DType(), c.size, c.size)
	}
	if err := c.begin(); err != nil {
		return c.errorf("all-gather: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	per := perChunk(c.stageElems(), c.size+1)
	if per == 0 {
		return c.errorf("all-gather: a staging chunk of %d bytes is too small for %d ranks", c.chunkBytes, c.size)
	}
	ps, direct := c.direct(out, in)
	direct = direct && int64(c.size)*int64(n) <= 1<<31-1 // displacements are C ints
	if !direct {
		if err := c.stageMem(); err != nil {
			return c.errorf("all-gather: %w", err)
		}
	}
	h := c.lib.h
	es := dt.Size()
	err := chunks(n, per, func(off, k int) error {
		if direct {
			send, recv := unsafe.Add(ps[1], off*es), unsafe.Add(ps[0], off*es)
			return c.onThread(func() error {
				counts, displs := c.setCounts(k, n)
				t := c.directType(dt)
				return c.check("MPI_Allgatherv", call(c.lib.allgatherv, uintptr(send), uintptr(k), t, uintptr(recv), counts, displs, t, h.commWorld))
			})
		}
		// recv: size runs of k at 0; send: k elements at size·per.
		send := c.size * per
		c.stageIn(send, in.Slice(off, k))
		if err := c.onThread(func() error {
			counts, displs := c.setCounts(k, k)
			t := c.stagedType(dt)
			return c.check("MPI_Allgatherv", call(c.lib.allgatherv, c.stage.addr(send*4), uintptr(k), t, c.stage.addr(0), counts, displs, t, h.commWorld))
		}); err != nil {
			return err
		}
		for r := range c.size {
			c.stageOut(out.Slice(r*n+off, k), r*k)
		}
		return nil
	})
	if err != nil {
		return c.errorf("all-gather of %d %v elements a rank: %w", n, dt, err)
	}
	return nil
}

// Broadcast implements dist.Comm: root's buf (F32, BF16 or I32, n
// elements on every rank) is copied into every rank's buf.
func (c *Comm) Broadcast(buf kernels.Buffer, root int) error {
	n, dt := buf.Len(), buf.DType()
	if err := checkDType("broadcast", dt); err != nil {
		return c.errorf("%w", err)
	}
	if root < 0 || root >= c.size {
		return c.errorf("broadcast from rank %d in a group of %d", root, c.size)
	}
	if err := c.begin(); err != nil {
		return c.errorf("broadcast: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	ps, direct := c.direct(buf)
	if !direct {
		if err := c.stageMem(); err != nil {
			return c.errorf("broadcast: %w", err)
		}
	}
	h := c.lib.h
	err := chunks(n, perChunk(c.stageElems(), 1), func(off, k int) error {
		if direct {
			p := unsafe.Add(ps[0], off*dt.Size())
			return c.onThread(func() error {
				return c.check("MPI_Bcast", call(c.lib.bcast, uintptr(p), uintptr(k), c.directType(dt), uintptr(root), h.commWorld))
			})
		}
		if c.rank == root {
			c.stageIn(0, buf.Slice(off, k))
		}
		if err := c.onThread(func() error {
			return c.check("MPI_Bcast", call(c.lib.bcast, c.stage.addr(0), uintptr(k), c.stagedType(dt), uintptr(root), h.commWorld))
		}); err != nil {
			return err
		}
		if c.rank != root {
			c.stageOut(buf.Slice(off, k), 0)
		}
		return nil
	})
	if err != nil {
		return c.errorf("broadcast of %d %v elements from rank %d: %w", n, dt, root, err)
	}
	return nil
}

// Barrier implements dist.Comm.
func (c *Comm) Barrier() error {
	if err := c.begin(); err != nil {
		return c.errorf("barrier: %w", err)
	}
	defer c.mu.Unlock()
	if err := c.onThread(func() error {
		return c.check("MPI_Barrier", call(c.lib.barrier, c.lib.h.commWorld))
	}); err != nil {
		return c.errorf("barrier: %w", err)
	}
	return nil
}

// BroadcastBytes copies root's b into every rank's b (host memory, the
// same length on every rank), as MPI_BYTE: for setup data such as NCCL's
// unique id.
func (c *Comm) BroadcastBytes(b []byte, root int) error {
	if root < 0 || root >= c.size {
		return c.errorf("broadcast of %d bytes from rank %d in a group of %d", len(b), root, c.size)
	}
	if len(b) > 1<<30 {
		return c.errorf("broadcast of %d bytes: at most 1 GiB", len(b))
	}
	if err := c.begin(); err != nil {
		return c.errorf("broadcast: %w", err)
	}
	defer c.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	if err := c.onThread(func() error {
		return c.check("MPI_Bcast", call(c.lib.bcast, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), c.lib.h.byte, uintptr(root), c.lib.h.commWorld))
	}); err != nil {
		return c.errorf("broadcast of %d bytes from rank %d: %w", len(b), root, err)
	}
	return nil
}

// AllGatherBytes concatenates every rank's in (host memory, n bytes, the
// same n on every rank) into out (Size·n bytes), rank order: for setup
// data such as each rank's result of a step every rank must agree on.
func (c *Comm) AllGatherBytes(out, in []byte) error {
	n := len(in)
	if len(out) != c.size*n {
		return c.errorf("all-gather of %d bytes into %d on %d ranks", n, len(out), c.size)
	}
	if int64(c.size)*int64(n) > 1<<30 {
		return c.errorf("all-gather of %d bytes a rank: at most 1 GiB in all", n)
	}
	if err := c.begin(); err != nil {
		return c.errorf("all-gather: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	if err := c.onThread(func() error {
		counts, displs := c.setCounts(n, n)
		return c.check("MPI_Allgatherv", call(c.lib.allgatherv, uintptr(unsafe.Pointer(&in[0])), uintptr(n), c.lib.h.byte,
			uintptr(unsafe.Pointer(&out[0])), counts, displs, c.lib.h.byte, c.lib.h.commWorld))
	}); err != nil {
		return c.errorf("all-gather of %d bytes a rank: %w", n, err)
	}
	return nil
}
