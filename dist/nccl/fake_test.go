package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// rendezvous lets size ranks exchange one value each: wait returns every
// rank's value once all have arrived. fail makes every waiting and later
// wait return the error.
type rendezvous struct {
	size    int
	mu      sync.Mutex
	cond    *sync.Cond
	arrived int
	gen     uint64
	vals    []any
	snap    []any // the values of the last completed round
	failed  error
}

func newRendezvous(size int) *rendezvous {
	r := &rendezvous{size: size, vals: make([]any, size)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *rendezvous) wait(rank int, v any) ([]any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != nil {
		return nil, r.failed
	}
	r.vals[rank] = v
	gen := r.gen
	r.arrived++
	if r.arrived == r.size {
		r.arrived = 0
		r.snap = append([]any(nil), r.vals...)
		r.gen++
		r.cond.Broadcast()
		return r.snap, nil
	}
	for gen == r.gen && r.failed == nil {
		r.cond.Wait()
	}
	if gen == r.gen {
		return nil, r.failed
	}
	// The next round cannot complete without this rank: snap is still
	// this round's.
	return r.snap, nil
}

func (r *rendezvous) fail(err error) {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = err
	}
	r.cond.Broadcast()
	r.mu.Unlock()
}

// hostGPU stands in for a CUDA device: kernels/cpu's memory (Go slices,
// whose addresses are host addresses) as device memory, a stream handle of
// its own, and a record of whether a call runs inside OnStream.
type hostGPU struct {
	*cpu.Device
	ordinal  int
	inStream bool
	polls    int // StreamDone calls
	events   *[]string
}

func newHostGPU(t *testing.T, ordinal int) *hostGPU {
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &hostGPU{Device: d, ordinal: ordinal, events: new([]string)}
}

func (h *hostGPU) stream() uintptr { return 0x5700 + uintptr(h.ordinal) }

func (h *hostGPU) Ordinal() int { return h.ordinal }

func (h *hostGPU) OnStream(f func(stream uintptr) error) error {
	h.inStream = true
	defer func() { h.inStream = false }()
	return f(h.stream())
}

// StreamDone says the stream is busy every other time, so waits poll.
func (h *hostGPU) StreamDone() (bool, error) {
	h.polls++
	return h.polls%2 == 0, nil
}

// Addr is the address of a kernels/cpu buffer's first element.
func (h *hostGPU) Addr(b kernels.Buffer) (uintptr, error) {
	v := reflect.ValueOf(b)
	if v.Kind() != reflect.Slice {
		return 0, fmt.Errorf("a %T is not device memory", b)
	}
	if v.Len() == 0 {
		return 0, nil
	}
	return v.Pointer(), nil
}

// hostBytes is the host memory [p, p+n).
func hostBytes(p uintptr, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}

// fakeWorld is the NCCL of one test: unique ids and the communicators
// built from them.
type fakeWorld struct {
	mu     sync.Mutex
	failed error // set by failAll: communicators made later fail too
	nextID byte
	groups map[UniqueID]*fakeGroup
}

type fakeGroup struct {
	size int
	rv   *rendezvous
}

// failAll makes every communicator's waits fail.
func (w *fakeWorld) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed = err
	for _, g := range w.groups {
		g.rv.fail(err)
	}
}

func newFakeWorld() *fakeWorld { return &fakeWorld{groups: map[UniqueID]*fakeGroup{}} }

// group returns the communicator of id (made by the first rank to init).
func (w *fakeWorld) group(id UniqueID, size int) (*fakeGroup, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.groups[id]
	if !ok {
		if id[0] != 'N' {
			return nil, errors.New("an id ncclGetUniqueId did not make")
		}
		g = &fakeGroup{size: size, rv: newRendezvous(size)}
		if w.failed != nil {
			g.rv.fail(w.failed)
		}
		w.groups[id] = g
	}
	if g.size != size {
		return nil, fmt.Errorf("nranks %d, the communicator has %d", size, g.size)
	}
	return g, nil
}

// fakeCall is one collective as the fake received it.
type fakeCall struct {
	fn          string
	send, recv  uintptr
	count       int
	dt          dataType
	op          redOp
	root        int
	comm, strm  uintptr
	rank, ranks int
}

// fakeNCCL is one rank's NCCL: it checks every call's arguments (inside
// OnStream, the rank's stream and communicator, a known dtype), records
// it, and performs the collectives with the other ranks of its
// communicator over host memory, summing in rank order (BF16 rounded
// after each addition, as NCCL's bf16 sums are).
type fakeNCCL struct {
	t     *testing.T
	world *fakeWorld
	dev   *hostGPU
	group *fakeGroup
	rank  int
	comm  uintptr

	calls []fakeCall
	// fail makes a function return a result (after recording the call).
	fail  map[string]result
	async result // what ncclCommGetAsyncError reports
	ended []string
}

var _ api = (*fakeNCCL)(nil)

func (f *fakeNCCL) event(s string) { *f.dev.events = append(*f.dev.events, s) }

func (f *fakeNCCL) getVersion(v *int32) result { *v = 22703; return ncclSuccess }

func (f *fakeNCCL) getUniqueID(id *UniqueID) result {
	f.event("getUniqueId")
	if r, ok := f.fail["ncclGetUniqueId"]; ok {
		return r
	}
	f.world.mu.Lock()
	f.world.nextID++
	*id = UniqueID{}
	copy(id[:], fmt.Sprintf("NCCL fake id %d", f.world.nextID))
	id[127] = f.world.nextID // bytes at the end travel too
	f.world.mu.Unlock()
	return ncclSuccess
}

func (f *fakeNCCL) commInitRank(comm *uintptr, nranks int, id *UniqueID, rank int) result {
	f.event(fmt.Sprintf("commInitRank(%d, %d, id %d) on cuda:%d", nranks, rank, id[127], f.dev.ordinal))
	if !f.dev.inStream {
		f.t.Errorf("rank %d: ncclCommInitRank outside OnStream (no current device)", rank)
	}
	if r, ok := f.fail["ncclCommInitRank"]; ok {
		return r
	}
	if rank < 0 || rank >= nranks {
		return ncclInvalidArgument
	}
	g, err := f.world.group(*id, nranks)
	if err != nil {
		f.t.Errorf("rank %d: ncclCommInitRank: %v", rank, err)
		return ncclInvalidArgument
	}
	vals, err := g.rv.wait(rank, rank)
	if err != nil {
		return 6 // ncclRemoteError
	}
	for r, v := range vals {
		if v.(int) != r {
			f.t.Errorf("ncclCommInitRank: slot %d holds rank %v", r, v)
		}
	}
	f.group, f.rank = g, rank
	f.comm = 0xc0de00 + uintptr(rank)
	*comm = f.comm
	return ncclSuccess
}

// elemSize is the bytes of one element of dt.
func elemSize(dt dataType) int {
	if dt == ncclBfloat16 {
		return 2
	}
	return 4
}

// get reads element i at p as float64.
func get(p uintptr, dt dataType, i int) float64 {
	b := hostBytes(p+uintptr(i*elemSize(dt)), elemSize(dt))
	switch dt {
	case ncclBfloat16:
		return float64(cpu.FromBF16(binary.LittleEndian.Uint16(b)))
	case ncclInt32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
}

// put encodes v as dt into b.
func put(b []byte, dt dataType, v float64) {
	switch dt {
	case ncclBfloat16:
		binary.LittleEndian.PutUint16(b, cpu.ToBF16(float32(v)))
	case ncclInt32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	default:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	}
}

// round is v as dt holds it (the rounding after each addition).
func round(dt dataType, v float64) float64 {
	b := make([]byte, 4)
	put(b, dt, v)
	switch dt {
	case ncclBfloat16:
		return float64(cpu.FromBF16(binary.LittleEndian.Uint16(b)))
	case ncclInt32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
}

// collective checks and records c, runs it with the group and writes this
// rank's result into c.recv.
func (f *fakeNCCL) collective(c fakeCall) result {
	c.rank = f.rank
	f.calls = append(f.calls, c)
	if r, ok := f.fail[c.fn]; ok {
		return r
	}
	if !f.dev.inStream {
		f.t.Errorf("rank %d: %s outside OnStream", f.rank, c.fn)
	}
	if c.comm != f.comm || f.group == nil {
		f.t.Errorf("rank %d: %s on communicator %#x, want %#x", f.rank, c.fn, c.comm, f.comm)
		return ncclInvalidArgument
	}
	if c.strm != f.dev.stream() {
		f.t.Errorf("rank %d: %s on stream %#x, the device's is %#x", f.rank, c.fn, c.strm, f.dev.stream())
	}
	if c.dt != ncclFloat32 && c.dt != ncclBfloat16 && c.dt != ncclInt32 {
		f.t.Errorf("rank %d: %s of dtype %d", f.rank, c.fn, c.dt)
		return ncclInvalidArgument
	}
	if c.count <= 0 || c.send == 0 || c.recv == 0 {
		f.t.Errorf("rank %d: %s of %d elements at %#x -> %#x", f.rank, c.fn, c.count, c.send, c.recv)
		return ncclInvalidArgument
	}
	size := f.group.size
	vals, err := f.group.rv.wait(f.rank, c)
	if err != nil {
		return 6
	}
	calls := make([]fakeCall, size)
	for r, v := range vals {
		calls[r] = v.(fakeCall)
		if o := calls[r]; o.fn != c.fn || o.count != c.count || o.dt != c.dt || o.root != c.root || o.op != c.op {
			f.t.Errorf("rank %d calls %+v, rank %d %+v", f.rank, c, r, o)
			f.group.rv.fail(errors.New("mismatched collectives"))
			return ncclInvalidUsage
		}
	}
	es := elemSize(c.dt)
	n := c.count
	var out []byte
	sum := func(off int) []byte {
		b := make([]byte, n*es)
		for i := range n {
			acc := get(calls[0].send, c.dt, off+i)
			for r := 1; r < size; r++ {
				acc = round(c.dt, acc+get(calls[r].send, c.dt, off+i))
			}
			put(b[i*es:], c.dt, acc)
		}
		return b
	}
	switch c.fn {
	case "ncclAllReduce":
		out = sum(0)
	case "ncclReduceScatter":
		out = sum(f.rank * n)
	case "ncclAllGather":
		for r := range size {
			out = append(out, hostBytes(calls[r].send, n*es)...)
		}
	case "ncclBroadcast":
		out = append(out, hostBytes(calls[c.root].send, n*es)...)
	}
	// Every rank has read what it needs before any writes.
	if _, err := f.group.rv.wait(f.rank, nil); err != nil {
		return 6
	}
	copy(hostBytes(c.recv, len(out)), out)
	return ncclSuccess
}

func (f *fakeNCCL) allReduce(send, recv uintptr, count int, dt dataType, op redOp, comm, stream uintptr) result {
	return f.collective(fakeCall{fn: "ncclAllReduce", send: send, recv: recv, count: count, dt: dt, op: op, comm: comm, strm: stream})
}

func (f *fakeNCCL) reduceScatter(send, recv uintptr, recvCount int, dt dataType, op redOp, comm, stream uintptr) result {
	return f.collective(fakeCall{fn: "ncclReduceScatter", send: send, recv: recv, count: recvCount, dt: dt, op: op, comm: comm, strm: stream})
}

func (f *fakeNCCL) allGather(send, recv uintptr, sendCount int, dt dataType, comm, stream uintptr) result {
	return f.collective(fakeCall{fn: "ncclAllGather", send: send, recv: recv, count: sendCount, dt: dt, comm: comm, strm: stream})
}

func (f *fakeNCCL) broadcast(send, recv uintptr, count int, dt dataType, root int, comm, stream uintptr) result {
	return f.collective(fakeCall{fn: "ncclBroadcast", send: send, recv: recv, count: count, dt: dt, root: root, comm: comm, strm: stream})
}

func (f *fakeNCCL) commGetAsyncError(comm uintptr, async *result) result {
	if comm != f.comm {
		f.t.Errorf("rank %d: ncclCommGetAsyncError on %#x, want %#x", f.rank, comm, f.comm)
	}
	*async = f.async
	return ncclSuccess
}

func (f *fakeNCCL) end(fn string, comm uintptr) result {
	f.ended = append(f.ended, fn)
	if !f.dev.inStream {
		f.t.Errorf("rank %d: %s outside OnStream", f.rank, fn)
	}
	if comm != f.comm {
		f.t.Errorf("rank %d: %s on %#x, want %#x", f.rank, fn, comm, f.comm)
	}
	if r, ok := f.fail[fn]; ok {
		return r
	}
	return ncclSuccess
}

func (f *fakeNCCL) commFinalize(comm uintptr) result { return f.end("ncclCommFinalize", comm) }
func (f *fakeNCCL) commDestroy(comm uintptr) result  { return f.end("ncclCommDestroy", comm) }
func (f *fakeNCCL) commAbort(comm uintptr) result    { return f.end("ncclCommAbort", comm) }

func (f *fakeNCCL) getErrorString(r result) string {
	return map[result]string{4: "invalid argument (run with NCCL_DEBUG=WARN for details)", 5: "invalid usage (run with NCCL_DEBUG=WARN for details)", 6: "remote process exited or there was a network error"}[r]
}

func (f *fakeNCCL) getLastError(uintptr) string { return "fake: the last error" }

// fakeBoot is the bootstrap of in-process ranks; it records its calls in
// the rank's event list.
type fakeBoot struct {
	rank, size int
	rv         *rendezvous
	events     *[]string
	closed     bool
}

func (b *fakeBoot) Rank() int { return b.rank }
func (b *fakeBoot) Size() int { return b.size }

func (b *fakeBoot) BroadcastBytes(p []byte, root int) error {
	*b.events = append(*b.events, fmt.Sprintf("broadcast %d bytes from %d", len(p), root))
	vals, err := b.rv.wait(b.rank, append([]byte(nil), p...))
	if err != nil {
		return err
	}
	copy(p, vals[root].([]byte))
	return nil
}

func (b *fakeBoot) AllGatherBytes(out, in []byte) error {
	*b.events = append(*b.events, fmt.Sprintf("all-gather %d bytes", len(in)))
	vals, err := b.rv.wait(b.rank, append([]byte(nil), in...))
	if err != nil {
		return err
	}
	for r, v := range vals {
		copy(out[r*len(in):], v.([]byte))
	}
	return nil
}

func (b *fakeBoot) Close() error {
	*b.events = append(*b.events, "bootstrap closed")
	b.closed = true
	return nil
}

// rankEnv is one in-process rank: its device, NCCL, bootstrap and the
// load result its loader gives.
type rankEnv struct {
	dev     *hostGPU
	nccl    *fakeNCCL
	boot    *fakeBoot
	loadErr error
	version int
}

// newRanks makes size ranks on GPUs 0 to size-1 of one host.
func newRanks(t *testing.T, size int) []*rankEnv {
	w := newFakeWorld()
	rv := newRendezvous(size)
	envs := make([]*rankEnv, size)
	for r := range envs {
		dev := newHostGPU(t, r)
		envs[r] = &rankEnv{
			dev:     dev,
			nccl:    &fakeNCCL{t: t, world: w, dev: dev, fail: map[string]result{}},
			boot:    &fakeBoot{rank: r, size: size, rv: rv, events: dev.events},
			version: 22703,
		}
	}
	return envs
}

func (e *rankEnv) load() (api, string, int, error) {
	if e.loadErr != nil {
		return nil, "", 0, e.loadErr
	}
	return e.nccl, "/fake/libnccl.so.2", e.version, nil
}

// run builds every rank's Comm and calls f with it, all ranks at once,
// and closes the Comms f leaves open; it returns each rank's error (New's
// or f's). A rank that fails makes the others' waits fail instead of
// hang.
func run(envs []*rankEnv, f func(c *Comm, e *rankEnv) error) []error {
	errs := make([]error, len(envs))
	var wg sync.WaitGroup
	for r, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := newComm(e.dev, e.boot, Options{}, e.load)
			if err == nil {
				err = f(c, e)
				if cerr := c.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				e.boot.rv.fail(fmt.Errorf("rank %d failed", r))
				e.nccl.world.failAll(fmt.Errorf("rank %d failed", r))
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errs
}
