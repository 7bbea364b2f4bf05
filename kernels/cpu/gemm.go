package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// The CPU GEMM is organised the GotoBLAS/BLIS way. C is cut into blocks of
// mc rows (A) × nc columns (B) over kc-deep slices of K. A is packed into
// mr-row micro-panels (alpha folded in) and B into nr-column micro-panels,
// both zero-padded to whole panels and laid out so that a micro-kernel reads
// them strictly sequentially:
//
//	packed A panel: a[p*mr + i] = alpha·op(A)[i0+i, p0+p]
//	packed B panel: b[p*nr + j] = op(B)[p0+p, j0+j]
//
// Packing absorbs every transpose variant, so one micro-kernel per ISA
// serves nn, nt, tn and tt. The loops, outermost first:
//
//	ic (mc rows): pack the A block for all of K (L3), shared by the threads
//	  → column units (at most nc columns), claimed by the threads
//	    → pc (kc deep): pack the unit's B block (L2)
//	      → ir (mr rows): one A micro-panel stays in L1
//	        → jr (nr cols): the micro-kernel streams a B micro-panel from L2
//
// Partial tiles at the bottom and right edges are computed into a scratch
// tile and merged into C. Single rows or columns (m == 1 or n == 1) skip
// all this for dot products and axpys (gemmGemv).
//
// Threads normally share an A block and split C's columns: they pack the A
// panels together, then each claims column units, packing the B blocks of
// its units itself (see gemmSched). When C has too few column tiles, they
// split the rows instead and each runs the loops alone on its rows.

// gemmKernel is a micro-kernel and the cache blocking tuned around it.
type gemmKernel struct {
	name   string
	mr, nr int // micro-tile: rows of A, columns of B
	kc     int // largest K slice of a micro-panel
	mc     int // largest A block, in rows (a multiple of mr)
	nc     int // largest B block, in columns (a multiple of nr)
	// tile computes the mr×nr tile c = Σ_p a[p*mr+i]·b[p*nr+j] + beta·c over
	// p < k (k ≥ 1), rows ldc elements apart. beta == 0 (either sign)
	// overwrites c without reading it.
	tile func(k int, a, b, c *float32, ldc int, beta float32)
	// dot returns Σ x[i]·y[i] over len(x) == len(y) elements.
	dot func(x, y []float32) float32
	// axpy does y[i] += alpha·x[i] over len(x) == len(y) elements.
	axpy func(alpha float32, x, y []float32)
	// packA and packB pack one micro-panel; see gemmPackAPanel and
	// gemmPackBPanel, the portable versions.
	packA func(d []float32, mr int, transA bool, a []float32, lda, i0, p0, rows, kc int, alpha float32)
	packB func(d []float32, nr int, transB bool, b []float32, ldb, p0, j0, cols, kc int)
	// packASrc and packBSrc, when set, pack a micro-panel of an operand
	// that is rounded to or stored in bf16 (gemmSrc not plain) directly,
	// as packA and packB would pack its float32 values, and report
	// whether they did (they take the layouts their assembly covers); the
	// rest goes through gemmConvert and packA or packB.
	packASrc func(d []float32, mr int, transA bool, a gemmSrc, lda, i0, p0, rows, kc int, alpha float32) bool
	packBSrc func(d []float32, nr int, transB bool, b gemmSrc, ldb, p0, j0, cols, kc int) bool
}

// gemmMinWork is the number of multiply-adds below which a GEMM runs on
// one goroutine: starting another costs about as much. Tests lower it.
var gemmMinWork = 1 << 20

// gemmABudget caps the packed A block (mc rows × all of K), in floats.
const gemmABudget = 4 << 20

// gemmScratch holds one goroutine's packing buffers. The slices are the raw
// allocations; gemmAligned carves 64-byte aligned views out of them. ha and
// hb are the bf16 A and B blocks of the bf16 tile kernels (gemm_bf16.go).
type gemmScratch struct {
	a, b, tile, vec []float32
	ha, hb          []uint16
	// conv holds a region of a bf16 operand as float32 for the fp32
	// packers (gemmConvert), mr·kc or nr·kc values.
	conv []float32
}

var gemmPool = sync.Pool{New: func() any { return new(gemmScratch) }}

// gemmAligned returns a 64-byte aligned slice of n elements backed by
// *buf, growing it when needed.
func gemmAligned[T float32 | uint16](buf *[]T, n int) []T {
	size := int(unsafe.Sizeof(T(0)))
	pad := 64 / size
	if cap(*buf) < n+pad {
		*buf = make([]T, n+pad)
	}
	s := (*buf)[:cap(*buf)]
	off := 0
	if r := uintptr(unsafe.Pointer(&s[0])) & 63; r != 0 {
		off = int(64-r) / size
	}
	return s[off : off+n : off+n]
}

// gemmSrc is a GEMM operand as the packing routines read it: float32
// values (f), float32 values rounded to bf16 as they are read (f with
// round), or bf16 values (h with bf). The fp32 GEMM only uses the first.
type gemmSrc struct {
	f     []float32
	h     []uint16
	bf    bool // the values are h
	round bool // f is rounded to bf16 as it is read
}

// plain reports whether the operand is float32 values used as they are.
func (s gemmSrc) plain() bool { return !s.bf && !s.round }

// len is the number of elements.
func (s gemmSrc) len() int {
	if s.bf {
		return len(s.h)
	}
	return len(s.f)
}

// from returns the operand from element o on.
func (s gemmSrc) from(o int) gemmSrc {
	if s.bf {
		s.h = s.h[o:]
	} else {
		s.f = s.f[o:]
	}
	return s
}

// at returns element o as float32 (rounded to bf16 when round is set).
func (s gemmSrc) at(o int) float32 {
	if s.bf {
		return FromBF16(s.h[o])
	}
	if s.round {
		return FromBF16(ToBF16(s.f[o]))
	}
	return s.f[o]
}

// bf16 returns element o as bf16 bits (rounded unless it already is).
func (s gemmSrc) bf16(o int) uint16 {
	if s.bf {
		return s.h[o]
	}
	return ToBF16(s.f[o])
}

// Gemm implements kernels.Ops.
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, c kernels.Buffer, ldc int) {
	if isBF16(a) || isBF16(b) {
		gemmBF16(d.isa, d.threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, f32(c), ldc)
		return
	}
	gemm(gemmKernelFor(d.isa), d.threads, transA, transB, m, n, k, alpha, f32(a), lda, f32(b), ldb, beta, f32(c), ldc)
}

// gemmCheck panics unless a rows×cols matrix with leading dimension ld fits
// in a buffer of n elements.
func gemmCheck(name string, rows, cols, ld, n int) {
	if ld < max(cols, 1) {
		panic(fmt.Sprintf("cpu: Gemm: ld%s = %d < %d", name, ld, cols))
	}
	if rows > 0 && cols > 0 && n < (rows-1)*ld+cols {
		panic(fmt.Sprintf("cpu: Gemm: %s has %d elements, want at least %d (%dx%d, ld %d)", name, n, (rows-1)*ld+cols, rows, cols, ld))
	}
}

// gemm is Gemm on slices with an explicit kernel and thread count.
func gemm(kern *gemmKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmBias(kern, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc)
}

// gemmBias is gemm plus a bias row: C = alpha·op(A)·op(B) + beta·C + bias
// with bias[j] added to every row (bias nil: none). The blocked path runs
// the bias as one more step of K: a column of ones in the packed A and the
// bias as a row of the packed B, so it costs no pass over C.
func gemmBias(kern *gemmKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias, c []float32, ldc int) {
	bias, ok := gemmPrologue(transA, transB, m, n, k, alpha, len(a), lda, len(b), ldb, beta, bias, c, ldc)
	if !ok {
		return
	}
	if m == 1 || n == 1 {
		if bias != nil {
			gemmScaleC(m, n, beta, c, ldc)
			gemmAddBias(m, bias, c, ldc)
			beta = 1
		}
		gemmGemv(kern, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmBiasBlocked(kern, threads, transA, transB, m, n, k, alpha, gemmSrc{f: a}, lda, gemmSrc{f: b}, ldb, beta, bias, c, ldc)
}

// gemmPrologue checks the sizes of a GEMM whose operands have na and nb
// elements and finishes the cases without products: empty C, and k == 0
// or alpha == 0 (C = beta·C + bias). It returns bias cut to n elements and
// whether products remain to be computed.
func gemmPrologue(transA, transB bool, m, n, k int, alpha float32, na, lda, nb, ldb int, beta float32, bias, c []float32, ldc int) ([]float32, bool) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("cpu: Gemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	gemmCheck("c", m, n, ldc, len(c))
	if m == 0 || n == 0 {
		return nil, false
	}
	if bias != nil {
		bias = bias[:n]
	}
	if k == 0 || alpha == 0 {
		gemmScaleC(m, n, beta, c, ldc)
		gemmAddBias(m, bias, c, ldc)
		return nil, false
	}
	if transA {
		gemmCheck("a", k, m, lda, na)
	} else {
		gemmCheck("a", m, k, lda, na)
	}
	if transB {
		gemmCheck("b", n, k, ldb, nb)
	} else {
		gemmCheck("b", k, n, ldb, nb)
	}
	return bias, true
}

// gemmSplit decides how t goroutines share a GEMM of mt×nt micro-tiles
// with m·n·k multiply-adds: along whichever dimension wastes the fewest
// micro-tiles (a thread's cost is its tile count); columns win ties
// because the threads then share the packed A. It returns the number of
// goroutines and whether they split the rows.
func gemmSplit(threads, mt, nt, m, n, k int) (t int, byRows bool) {
	t = min(threads, max(1, m*n*k/gemmMinWork))
	if t > 1 && mt*((nt+t-1)/t) > (mt+t-1)/t*nt {
		return min(t, mt), true
	}
	return min(t, nt), false
}

// gemmBiasBlocked is gemmBias for m, n ≥ 2 on the blocked path, with
// operands that may be rounded to bf16 as they are packed (gemmSrc).
func gemmBiasBlocked(kern *gemmKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) {
	mt, nt := (m+kern.mr-1)/kern.mr, (n+kern.nr-1)/kern.nr
	t, byRows := gemmSplit(threads, mt, nt, m, n, k)
	if byRows {
		gemmFanOut(t, func(i int) {
			lo, hi := i*mt/t*kern.mr, min((i+1)*mt/t*kern.mr, m)
			ao := lo * lda // row offset into op(A)
			if transA {
				ao = lo
			}
			gemmBlocked(kern, 1, transA, transB, hi-lo, n, k, alpha, a.from(ao), lda, b, ldb, beta, bias, c[lo*ldc:], ldc)
		})
		return
	}
	gemmBlocked(kern, t, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, bias, c, ldc)
}

// gemmFanOut runs fn(0), ..., fn(t-1), each once, on the caller's
// goroutine and the GEMM workers (at most t at a time; a share whose
// worker starts late may run on the caller instead), and returns when all
// have run.
func gemmFanOut(t int, fn func(i int)) { gemmFanOutN(t, t, fn) }

// gemmFanOutN is gemmFanOut for n shares on at most t goroutines: each
// goroutine runs the shares of its own range in order, then takes those
// left in the others' ranges, so that a worker that starts late (a parked
// thread takes tens of microseconds to wake) leaves its shares to the
// caller instead of the whole call waiting for it.
func gemmFanOutN(t, n int, fn func(i int)) {
	t = min(t, n)
	if t <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	w := gemmFanPool.Get().(*gemmFanWork)
	w.fn = fn
	w.sc.start(t, n, 1)
	w.sc.block(w, 0, n)
	w.sc.finish()
	w.fn = nil
	gemmFanPool.Put(w)
}

// gemmFanWork runs the shares of a gemmFanOut as the column tiles of a
// gemmSched (one tile a share, no A panels), so that they go to the
// polling workers of the blocked GEMMs: a matrix-vector product of
// decoding takes 20-200 µs, and starting a goroutine for its second half
// woke a parked thread each time (about 80 µs here, see gemmSpin).
type gemmFanWork struct {
	sc gemmSched
	fn func(i int)
}

func (w *gemmFanWork) sched() *gemmSched           { return &w.sc }
func (w *gemmFanWork) packPanel(*gemmScratch, int) {}
func (w *gemmFanWork) compute(_ *gemmScratch, first, end int) {
	for i := first; i < end; i++ {
		w.fn(i)
	}
}

var gemmFanPool = sync.Pool{New: func() any { return new(gemmFanWork) }}

// gemmAddBias adds bias[j] to C[i, j] for i < m, j < len(bias).
func gemmAddBias(m int, bias, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+len(bias)]
		for j, v := range bias {
			row[j] += v
		}
	}
}

// gemmScaleC does C = beta·C, writing zeros without reading C when beta is 0.
func gemmScaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// gemmBlock returns the block size for a dimension of n: at most limit,
// a multiple of unit, and as even as possible over the blocks.
func gemmBlock(n, limit, unit int) int {
	if n <= limit {
		return n
	}
	blocks := (n + limit - 1) / limit
	per := (n + blocks - 1) / blocks
	return min(limit, (per+unit-1)/unit*unit)
}

// gemmSched divides one A block of a blocked GEMM between goroutines.
// Work is claimed, not assigned. For each A block the goroutines first take
// A panels to pack from a counter and wait for the last panel in flight.
// Then each owns an equal range of column tiles, which it computes front
// to back in units of at most chunk tiles; a goroutine done with its own
// range steals half of what is left of the fullest other range, from the
// back. On an idle machine that is a static split with the fewest units
// (every unit streams the whole A block); on a busy one, a goroutine that
// starts late finds less to do instead of holding everyone up.
type gemmSched struct {
	t      int          // goroutines
	s      *gemmScratch // the caller's: the shared A block, the caller's B
	chunk  int          // column tiles per unit of an owned range
	ranges []gemmRange  // column tiles not yet claimed, one per goroutine
	panels int64        // A panels of the current block

	nextPanel, donePanels atomic.Int64
	started, pending      atomic.Int64 // workers that started, that are not done
	parked                atomic.Bool  // the caller blocked waiting for the workers
	wg                    sync.WaitGroup
}

// gemmWork is a blocked GEMM as gemmSched drives it: the fp32 gemmJob and
// the bf16 gemmTileJob.
type gemmWork interface {
	sched() *gemmSched
	// packPanel packs A panel ip of the current block, with the
	// goroutine's scratch s.
	packPanel(s *gemmScratch, ip int)
	// compute computes column tiles [first, end) of the current A block
	// with the goroutine's scratch s.
	compute(s *gemmScratch, first, end int)
}

// start prepares the scheduler for t goroutines over nt column tiles in
// units of at most maxTiles, taking the caller's scratch from the pool.
func (sc *gemmSched) start(t, nt, maxTiles int) {
	sc.t = t
	own := (nt + t - 1) / t
	units := (own + maxTiles - 1) / maxTiles
	sc.chunk = (own + units - 1) / units
	if cap(sc.ranges) < t {
		sc.ranges = make([]gemmRange, t)
	}
	sc.ranges = sc.ranges[:t]
	sc.s = gemmPool.Get().(*gemmScratch)
}

// finish returns the caller's scratch to the pool.
func (sc *gemmSched) finish() {
	gemmPool.Put(sc.s)
	sc.s = nil
}

// block runs one A block of panels A panels and nt column tiles on the
// scheduler's goroutines, the caller included.
func (sc *gemmSched) block(w gemmWork, panels, nt int) {
	sc.panels = int64(panels)
	sc.nextPanel.Store(0)
	sc.donePanels.Store(0)
	for i := range sc.ranges {
		sc.ranges[i].set(i*nt/sc.t, (i+1)*nt/sc.t)
	}
	sc.wg.Add(sc.t - 1)
	sc.started.Store(0)
	sc.pending.Store(int64(sc.t - 1))
	sc.parked.Store(false)
	for i := 1; i < sc.t; i++ {
		gemmHandOff(gemmTask{w, i})
	}
	gemmRun(w, 0)
	// Poll for the workers while they run on other processors; a worker
	// that has not started may be queued on this one, so block then.
	if sc.t > 1 && sc.started.Load() == int64(sc.t-1) {
		gemmSpinWhile(gemmSpin, func() bool { return sc.pending.Load() > 0 })
	}
	if sc.pending.Load() > 0 {
		sc.parked.Store(true)
	}
	sc.wg.Wait()
}

// gemmTask is a share of a job for a worker goroutine.
type gemmTask struct {
	work gemmWork
	i    int
}

// gemmTasks hands tasks to idle workers. Workers are started on demand and
// then wait for more, so a GEMM starts no goroutine in steady state.
// gemmIdle counts the idle workers no task has been promised to: a sender
// that takes one (decrements it from a positive value) queues its task,
// which that worker will receive; when there is none it starts a worker.
var (
	gemmTasks = make(chan gemmTask, 256)
	gemmIdle  atomic.Int64
)

// gemmSpin is how long a GEMM's caller polls for its workers while they
// run on other processors, and gemmWorkerSpin how long an idle worker
// polls for its next task, before blocking. A blocked goroutine takes
// tens of microseconds to run again once woken (about 80 µs on the
// development machine, a VM: the runtime wakes a parked thread, which
// steals the goroutine), while a bf16 GEMM of a transformer layer on AMX
// takes 0.2-0.5 ms: without polling, the worker of a 512x768x768 bf16 GEMM
// on two threads typically started after the caller had packed all of A
// alone, and the caller then slept through the worker's last tiles.
//
// The polls do not yield the processor (a goroutine that yields in a loop
// keeps the other processors asleep, so a worker polling that way on the
// caller's processor would never run beside it), so each side polls only
// while the other runs elsewhere: the caller while all its workers have
// started, a worker unless the caller blocked (its wake-up may be queued
// on the worker's processor). A polling worker holds its processor, which
// delays other goroutines started meanwhile; the kernels' own parallel
// loops (Device.parallelFor, gemmFanOut) hand their shares to these same
// workers, so the poll covers the gap between two kernels of a layer: 100
// µs (20 µs made opt-125m decoding 11% and a 512x768x768 bf16 GEMM on two
// threads 9% slower). The caller polls up to 300 µs: a worker that started
// late finishes its share after the caller, and a caller that blocked
// meanwhile stops the worker's own poll, so the next call waits for a
// parked thread (50 µs left the 2-thread 512x768x768 bf16 GEMM at 1.5-1.9
// TFLOP/s from one batch of calls to the next, 300 µs at 1.8-2.0). Polls
// are skipped when GOMAXPROCS is 1.
var (
	gemmSpin       = 300 * time.Microsecond
	gemmWorkerSpin = 100 * time.Microsecond
)

// gemmSpinWhile polls cond until it is false or spin has passed.
func gemmSpinWhile(spin time.Duration, cond func() bool) {
	if spin <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return
	}
	start := time.Now()
	for i := 1; cond(); i++ {
		if i%64 == 0 && time.Since(start) > spin {
			return
		}
	}
}

// gemmHandOff gives task to an idle worker or to a new one.
func gemmHandOff(task gemmTask) {
	for {
		n := gemmIdle.Load()
		if n <= 0 {
			go gemmWorker(task)
			return
		}
		if gemmIdle.CompareAndSwap(n, n-1) {
			gemmTasks <- task
			return
		}
	}
}

func gemmWorker(task gemmTask) {
	for {
		sc := task.work.sched()
		sc.started.Add(1)
		gemmRun(task.work, task.i)
		gemmIdle.Add(1) // before pending: the caller's next GEMM may hand us its task
		sc.pending.Add(-1)
		parked := sc.parked.Load()
		sc.wg.Done()
		// Poll for the next task unless the caller blocked, then block.
		polled := false
		if !parked {
			gemmSpinWhile(gemmWorkerSpin, func() bool {
				select {
				case task = <-gemmTasks:
					polled = true
					return false
				default:
					return true
				}
			})
		}
		if !polled {
			task = <-gemmTasks
		}
	}
}

// gemmRun is goroutine i's part of the current A block.
func gemmRun(w gemmWork, i int) {
	sc := w.sched()
	s := sc.s
	if i > 0 {
		s = gemmPool.Get().(*gemmScratch)
		defer gemmPool.Put(s)
	}
	for {
		ip := sc.nextPanel.Add(1) - 1
		if ip >= sc.panels {
			break
		}
		w.packPanel(s, int(ip))
		sc.donePanels.Add(1)
	}
	for sc.donePanels.Load() < sc.panels {
		runtime.Gosched() // another goroutine is packing the last panels
	}
	for {
		first, end, ok := sc.ranges[i].claimFront(sc.chunk)
		if !ok {
			// Steal from the range with the most tiles left.
			victim, most := -1, 0
			for v := range sc.ranges {
				if left := sc.ranges[v].left(); left > most {
					victim, most = v, left
				}
			}
			if victim < 0 {
				break
			}
			if first, end, ok = sc.ranges[victim].claimBack(sc.chunk); !ok {
				continue
			}
		}
		w.compute(s, first, end)
	}
}

// gemmJob is one gemmBlocked call, shared by its goroutines.
type gemmJob struct {
	gemmSched
	kern           *gemmKernel
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b           gemmSrc
	c              []float32
	lda, ldb, ldc  int
	bias           []float32 // nil or n floats: K step 0 (see gemmBias)
	kv             int       // k, plus 1 with a bias

	ap     []float32 // the packed A block
	kcMax  int
	mcPad  int // rows of ap
	ic, mc int // the current A block: rows ic..ic+mc
}

var gemmJobPool = sync.Pool{New: func() any { return new(gemmJob) }}

// gemmBlocked runs the blocked loops on t goroutines sharing the packed A
// and splitting the columns of C.
func gemmBlocked(kern *gemmKernel, t int, transA, transB bool, m, n, k int, alpha float32, a gemmSrc, lda int, b gemmSrc, ldb int, beta float32, bias, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	j := gemmJobPool.Get().(*gemmJob)
	j.kern, j.transA, j.transB = kern, transA, transB
	j.m, j.n, j.k, j.alpha, j.beta = m, n, k, alpha, beta
	j.a, j.b, j.c, j.lda, j.ldb, j.ldc = a, b, c, lda, ldb, ldc
	j.bias, j.kv = bias, k
	if bias != nil {
		j.kv++
	}
	j.kcMax = gemmBlock(j.kv, kern.kc, 1)
	mcMax := gemmBlock(m, max(mr, min(kern.mc, gemmABudget/j.kv/mr*mr)), mr)
	j.mcPad = (mcMax + mr - 1) / mr * mr
	nt := (n + nr - 1) / nr
	j.start(t, nt, max(1, kern.nc/nr))
	// The A block is stored K slice by K slice: slice pc starts at
	// mcPad·pc and holds mr-row panels of kc·mr floats.
	j.ap = gemmAligned(&j.s.a, j.mcPad*j.kv)
	for ic := 0; ic < m; ic += mcMax {
		j.ic, j.mc = ic, min(mcMax, m-ic)
		j.block(j, (j.mc+mr-1)/mr, nt)
	}
	j.finish()
	j.ap, j.a, j.b, j.c, j.bias = nil, gemmSrc{}, gemmSrc{}, nil, nil
	gemmJobPool.Put(j)
}

func (j *gemmJob) sched() *gemmSched { return &j.gemmSched }

// compute is gemmWork.compute: column tiles [first, end) of the A block.
func (j *gemmJob) compute(s *gemmScratch, first, end int) {
	lo, hi := first*j.kern.nr, min(end*j.kern.nr, j.n)
	gemmCompute(j.kern, s, j.ap, j.mcPad, j.mc, hi-lo, j.kv, j.kcMax, j.transB, j.b, j.ldb, lo, j.beta, j.bias, j.c[j.ic*j.ldc+lo:], j.ldc)
}

// gemmRange is a range of column tiles [front, back) that its owner claims
// from the front and others steal from the back, packed in one word so
// that a compare-and-swap moves either end. It fills a cache line so that
// the owners' claims do not contend.
type gemmRange struct {
	fb atomic.Uint64 // front<<32 | back
	_  [56]byte
}

func (r *gemmRange) set(front, back int) { r.fb.Store(uint64(front)<<32 | uint64(back)) }

func (r *gemmRange) left() int {
	v := r.fb.Load()
	return max(0, int(uint32(v))-int(v>>32))
}

// claimFront takes up to n tiles from the front.
func (r *gemmRange) claimFront(n int) (first, end int, ok bool) {
	for {
		v := r.fb.Load()
		f, b := int(v>>32), int(uint32(v))
		if f >= b {
			return 0, 0, false
		}
		e := min(f+n, b)
		if r.fb.CompareAndSwap(v, uint64(e)<<32|uint64(b)) {
			return f, e, true
		}
	}
}

// claimBack takes half of what is left, at most n tiles, from the back.
func (r *gemmRange) claimBack(n int) (first, end int, ok bool) {
	for {
		v := r.fb.Load()
		f, b := int(v>>32), int(uint32(v))
		if f >= b {
			return 0, 0, false
		}
		s := max(b-min(n, (b-f+1)/2), f)
		if r.fb.CompareAndSwap(v, uint64(f)<<32|uint64(s)) {
			return s, b, true
		}
	}
}

// packPanel packs A panel ip of the current block for every K slice.
func (j *gemmJob) packPanel(s *gemmScratch, ip int) {
	mr := j.kern.mr
	for pc := 0; pc < j.kv; pc += j.kcMax {
		kc := min(j.kcMax, j.kv-pc)
		o := j.mcPad*pc + ip*mr*kc
		d := j.ap[o : o+mr*kc]
		p0, kr := pc, kc // the slice in real K
		if j.bias != nil {
			if pc == 0 {
				for x := range mr {
					d[x] = 1
				}
				d, kr = d[mr:], kc-1
			} else {
				p0--
			}
		}
		if kr > 0 {
			i0, rows := j.ic+ip*mr, min(mr, j.mc-ip*mr)
			switch {
			case j.a.plain():
				j.kern.packA(d, mr, j.transA, j.a.f, j.lda, i0, p0, rows, kr, j.alpha)
			case j.kern.packASrc != nil && j.kern.packASrc(d, mr, j.transA, j.a, j.lda, i0, p0, rows, kr, j.alpha):
			case j.transA:
				// op(A)[i, p] = a[p*lda + i]: kr runs of rows values.
				f := gemmConvert(s, j.a, p0*j.lda+i0, j.lda, kr, rows)
				j.kern.packA(d, mr, true, f, rows, 0, 0, rows, kr, j.alpha)
			default:
				f := gemmConvert(s, j.a, i0*j.lda+p0, j.lda, rows, kr)
				j.kern.packA(d, mr, false, f, kr, 0, 0, rows, kr, j.alpha)
			}
		}
	}
}

// gemmCompute computes the mc×n block of C at c (rows ldc apart) from the
// packed A block ap and columns j0..j0+n of op(B), packing B as it goes.
// k counts the bias step when bias is not nil.
func gemmCompute(kern *gemmKernel, s *gemmScratch, ap []float32, mcPad, mc, n, k, kcMax int, transB bool, b gemmSrc, ldb, j0 int, beta float32, bias, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	ncMax := gemmBlock(n, kern.nc, nr)
	bp := gemmAligned(&s.b, (ncMax+nr-1)/nr*nr*kcMax)
	tile := gemmAligned(&s.tile, mr*nr)
	for pc := 0; pc < k; pc += kcMax {
		kc := min(kcMax, k-pc)
		bet := beta
		if pc > 0 {
			bet = 1
		}
		for jc := 0; jc < n; jc += ncMax {
			nc := min(ncMax, n-jc)
			for jp := 0; jp < nc; jp += nr {
				d := bp[jp*kc : (jp+nr)*kc]
				cols := min(nr, nc-jp)
				p0, kr := pc, kc // the slice in real K
				if bias != nil {
					if pc == 0 {
						copy(d[:cols], bias[j0+jc+jp:][:cols])
						clear(d[cols:nr])
						d, kr = d[nr:], kc-1
					} else {
						p0--
					}
				}
				if kr > 0 {
					j := j0 + jc + jp
					switch {
					case b.plain():
						kern.packB(d, nr, transB, b.f, ldb, p0, j, cols, kr)
					case kern.packBSrc != nil && kern.packBSrc(d, nr, transB, b, ldb, p0, j, cols, kr):
					case transB:
						// op(B)[p, j] = b[j*ldb + p]: cols runs of kr values.
						f := gemmConvert(s, b, j*ldb+p0, ldb, cols, kr)
						kern.packB(d, nr, true, f, kr, 0, 0, cols, kr)
					default:
						f := gemmConvert(s, b, p0*ldb+j, ldb, kr, cols)
						kern.packB(d, nr, false, f, cols, 0, 0, cols, kr)
					}
				}
			}
			for ir := 0; ir < mc; ir += mr {
				mrr := min(mr, mc-ir)
				o := mcPad*pc + ir*kc
				apan := ap[o : o+mr*kc]
				crow := ir * ldc
				for jr := 0; jr < nc; jr += nr {
					nrr := min(nr, nc-jr)
					bpan := bp[jr*kc : (jr+nr)*kc]
					if mrr == mr && nrr == nr {
						kern.tile(kc, &apan[0], &bpan[0], &c[crow+jc+jr], ldc, bet)
						continue
					}
					kern.tile(kc, &apan[0], &bpan[0], &tile[0], nr, 0)
					gemmMergeTile(tile, nr, mrr, nrr, bet, c[crow+jc+jr:], ldc)
				}
			}
		}
	}
}

// gemmConvert returns the rows×cols region of src that starts at element
// o, rows ld apart, as float32 values rows cols apart in s.conv: BF16
// values widened, F32 values rounded to bf16 (src.round) or copied. The
// fp32 packers (assembly for whole panels) then pack the region as they
// pack a float32 operand. Converting first and packing second keeps both
// vectorised (a region row is a contiguous run; the packers transpose
// float32 panels in assembly), where converting element by element while
// transposing ran at about half the fp32 GEMM's speed.
func gemmConvert(s *gemmScratch, src gemmSrc, o, ld, rows, cols int) []float32 {
	f := gemmAligned(&s.conv, rows*cols)
	for r := range rows {
		gemmRoundRun(f[r*cols:(r+1)*cols], src, o+r*ld, 1)
	}
	return f
}

// gemmMergeTile does C = T + beta·C for the top-left rows×cols of a tile T
// whose rows are ldt apart (beta 0 overwrites).
func gemmMergeTile(t []float32, ldt, rows, cols int, beta float32, c []float32, ldc int) {
	for i := range rows {
		src := t[i*ldt : i*ldt+cols]
		dst := c[i*ldc : i*ldc+cols]
		if beta == 0 {
			copy(dst, src)
			continue
		}
		for j, v := range src {
			dst[j] = v + beta*dst[j]
		}
	}
}

// gemmPackAPanel packs one A panel: d[p*mr + i] = alpha·op(A)[i0+i, p0+p]
// for p < kc, i < rows, and zeros for rows ≤ i < mr.
func gemmPackAPanel(d []float32, mr int, transA bool, a []float32, lda, i0, p0, rows, kc int, alpha float32) {
	d = d[:mr*kc]
	if transA {
		// op(A)[i, p] = a[p*lda + i]: each p is a contiguous run.
		for p := range kc {
			src := a[(p0+p)*lda+i0:][:rows]
			o := d[p*mr : p*mr+mr]
			for i, v := range src {
				o[i] = alpha * v
			}
			clear(o[rows:])
		}
		return
	}
	// op(A)[i, p] = a[i*lda + p]: transpose each row into column i.
	for i := range rows {
		gemmScatter(d[i:], a[(i0+i)*lda+p0:][:kc], mr, alpha)
	}
	gemmZeroColumns(d, mr, rows, kc)
}

// gemmPackBPanel packs one B panel: d[p*nr + j] = op(B)[p0+p, j0+j] for
// p < kc, j < cols, and zeros for cols ≤ j < nr.
func gemmPackBPanel(d []float32, nr int, transB bool, b []float32, ldb, p0, j0, cols, kc int) {
	d = d[:nr*kc]
	if !transB {
		// op(B)[p, j] = b[p*ldb + j]: each p is a contiguous run.
		for p := range kc {
			o := d[p*nr : p*nr+nr]
			copy(o, b[(p0+p)*ldb+j0:][:cols])
			clear(o[cols:])
		}
		return
	}
	// op(B)[p, j] = b[j*ldb + p]: transpose each row into column j.
	for j := range cols {
		gemmScatter(d[j:], b[(j0+j)*ldb+p0:][:kc], nr, 1)
	}
	gemmZeroColumns(d, nr, cols, kc)
}

// gemmZeroColumns zeros d[p*ld + j] for from ≤ j < ld, p < kc.
func gemmZeroColumns(d []float32, ld, from, kc int) {
	if from == ld {
		return
	}
	for p := range kc {
		clear(d[p*ld+from : p*ld+ld])
	}
}

// gemmScatter writes dst[p*stride] = alpha·src[p].
func gemmScatter(dst, src []float32, stride int, alpha float32) {
	if len(src) == 0 {
		return
	}
	_ = dst[(len(src)-1)*stride]
	for p, v := range src {
		dst[p*stride] = alpha * v
	}
}

// gemmGemv handles m == 1 or n == 1, where packing would cost more than the
// arithmetic: it runs on dot products and axpys over contiguous rows.
func gemmGemv(kern *gemmKernel, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	s := gemmPool.Get().(*gemmScratch)
	defer gemmPool.Put(s)
	if m == 1 {
		// y[1,n] = alpha·x[1,k]·op(B) + beta·y with x = op(A)[0,:].
		x := gemmAligned(&s.vec, k)
		for p := range k {
			if transA {
				x[p] = alpha * a[p*lda]
			} else {
				x[p] = alpha * a[p]
			}
		}
		y := c[:n]
		t := min(threads, max(1, n*k/gemmMinWork))
		sh := min(4*t, max(1, n/16)) // shares: see gemmFanOutN
		gemmFanOutN(t, sh, func(i int) {
			lo, hi := i*n/sh, (i+1)*n/sh
			if transB {
				// op(B)[:, j] is row j of b.
				for j := lo; j < hi; j++ {
					v := kern.dot(x, b[j*ldb:j*ldb+k])
					if beta != 0 {
						v += beta * y[j]
					}
					y[j] = v
				}
				return
			}
			gemmScaleC(1, hi-lo, beta, y[lo:hi], hi-lo)
			for p := range k {
				kern.axpy(x[p], b[p*ldb+lo:p*ldb+hi], y[lo:hi])
			}
		})
		return
	}
	// n == 1: y[m] = alpha·op(A)·v + beta·y with v = op(B)[:,0], y = C[:,0].
	v := gemmAligned(&s.vec, k+m)
	y := v[k:]
	v = v[:k]
	for p := range k {
		if transB {
			v[p] = alpha * b[p]
		} else {
			v[p] = alpha * b[p*ldb]
		}
	}
	t := min(threads, max(1, m*k/gemmMinWork))
	sh := min(4*t, max(1, m/16)) // shares: see gemmFanOutN
	gemmFanOutN(t, sh, func(i int) {
		lo, hi := i*m/sh, (i+1)*m/sh
		if !transA {
			for r := lo; r < hi; r++ {
				y[r] = kern.dot(a[r*lda:r*lda+k], v)
			}
		} else {
			// op(A)[r, p] = a[p*lda + r]: accumulate rows of a.
			clear(y[lo:hi])
			for p := range k {
				kern.axpy(v[p], a[p*lda+lo:p*lda+hi], y[lo:hi])
			}
		}
		for r := lo; r < hi; r++ {
			val := y[r]
			if beta != 0 {
				val += beta * c[r*ldc]
			}
			c[r*ldc] = val
		}
	})
}
