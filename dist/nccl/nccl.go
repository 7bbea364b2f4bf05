// Package nccl is a dist.Comm over NCCL, loaded at run time: the binary is
// built without cgo and runs without NCCL installed; only a multi-rank job
// on GPUs dlopens libnccl.so.2.
//
// # Setup
//
// One process a GPU, as mpirun -np 8 gochat train ... on an 8-GPU node
// starts them: each rank opens its own device (the CLI picks cuda:N from
// the launcher's local rank) and New builds the communicator over a
// Bootstrap, the MPI job (dist/mpi's Comm): every rank loads NCCL and the
// ranks exchange what they found (NCCL's version, their host and GPU) so
// that a rank without NCCL, different versions or two ranks on one GPU
// are one clear error on every rank instead of a hang; then rank 0 makes
// the unique id (ncclGetUniqueId), broadcasts it over MPI, and every rank
// calls ncclCommInitRank with its MPI rank and the job's size on its
// device. The MPI job stays the Comm's bootstrap: Close destroys the NCCL
// communicator, then closes the bootstrap (MPI_Finalize); Abort aborts
// both.
//
// # Streams and memory
//
// Every NCCL call is made with the device's context current on the
// calling OS thread (Device.OnStream) and queued on the device's one
// stream, so a collective runs after the ops queued before it and before
// the ops queued after it: a collective returns once queued, and the
// device's host reads wait for it like for any op. Buffers are device
// memory (Device.Addr): NCCL reads and writes them in place, views at an
// offset included; nothing is staged through the host. F32 travels as
// ncclFloat32, BF16 as ncclBfloat16 (NCCL sums bf16 in bf16, rounding each
// partial sum, as PyTorch's and DeepSpeed's bf16 all-reduces do), I32 as
// ncclInt32.
//
// # Errors
//
// A failed call is an *Error naming the NCCL function, the rank and the
// result (ncclInvalidUsage, ncclRemoteError, ...), with NCCL's own message
// (ncclGetLastError; NCCL_DEBUG=WARN prints more). After each collective
// the communicator's asynchronous error is checked (ncclCommGetAsyncError),
// and waits (Barrier, Close) poll it while the stream runs, so a failed
// peer is an error, not a hang.
package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// Device is the GPU a Comm's collectives run on; kernels/cuda's Device
// implements it.
type Device interface {
	kernels.Device
	// Ordinal is the GPU's index as the driver counts them (cuda:N).
	Ordinal() int
	// OnStream runs f on an OS thread where the device's context is
	// current, with the stream (a cudaStream_t) every op of the device is
	// queued on.
	OnStream(f func(stream uintptr) error) error
	// StreamDone reports whether the stream's queued work has finished,
	// without waiting; its error is the device's.
	StreamDone() (bool, error)
	// Addr is the device address of b's first element, an error when b is
	// not this device's memory.
	Addr(b kernels.Buffer) (uintptr, error)
}

// Bootstrap is the group a Comm is built over: the MPI job (dist/mpi's
// Comm implements it). It carries the setup's few bytes in host memory.
// Close closes it when it is an io.Closer, and Abort aborts it through
// its Abort(code int) when it has one.
type Bootstrap interface {
	Rank() int
	Size() int
	// BroadcastBytes copies root's b into every rank's b.
	BroadcastBytes(b []byte, root int) error
	// AllGatherBytes concatenates every rank's in into out, rank order.
	AllGatherBytes(out, in []byte) error
}

// Options configure New.
type Options struct {
	// Libs are the NCCL libraries to try, in order (kernels/cuda's
	// NCCLCandidates: GOCHAT_NCCL_LIB, the toolkit and pip wheel folders);
	// empty means libnccl.so.2 through the dynamic loader.
	Libs []string
	// Poll is the longest pause between two looks at the stream while a
	// wait (Barrier, Close) polls it and NCCL's asynchronous error
	// (0: 1 ms; the pause grows from 10 µs to it).
	Poll time.Duration
}

// Comm is a dist.Comm over an NCCL communicator of one GPU a rank. Its
// methods are safe for use by several goroutines (collectives run one at
// a time), but the Device is not: use the Comm from the goroutine that
// uses the Device. Every rank must call the collectives in the same
// order.
type Comm struct {
	dev        Device
	boot       Bootstrap
	api        api
	path       string
	version    int
	rank, size int
	poll       time.Duration

	mu     sync.Mutex // one call at a time
	comm   uintptr    // ncclComm_t
	closed bool
	one    kernels.Buffer // Barrier's one F32 element
}

var _ dist.Comm = (*Comm)(nil)

// loader loads NCCL: the library's functions, its path and version code.
type loader func() (api, string, int, error)

// New loads NCCL and builds the communicator of boot's ranks on dev (see
// the package comment). The error of a setup step every rank takes part
// in (loading, the exchange, the unique id) is returned on every rank as
// a *SetupError with AllRanks set, and the caller may close boot as after
// a success; any other error (ncclCommInitRank failed on this rank, while
// the others may wait for it) leaves the job to be aborted.
func New(dev Device, boot Bootstrap, opts Options) (*Comm, error) {
	cands := opts.Libs
	if len(cands) == 0 {
		cands = []string{"libnccl.so.2"}
	}
	return newComm(dev, boot, opts, func() (api, string, int, error) {
		l, v, err := openLib(sysDL{}, cands)
		if err != nil {
			return nil, "", 0, err
		}
		return l, l.path, v, nil
	})
}

// SetupError is an error of New.
type SetupError struct {
	// AllRanks is true when every rank returns this error from New at the
	// same step, so no rank waits for another.
	AllRanks bool
	Err      error
}

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// peerRecord is what each rank tells the others before the communicator
// is built: whether it loaded NCCL and which, its host and GPU, and why it
// failed.
const (
	recOK      = 0       // byte: 1 when NCCL loaded
	recVersion = 4       // int32: ncclGetVersion's code
	recOrdinal = 8       // int32: the GPU's ordinal
	recHost    = 16      // 64 bytes: the host name
	recErr     = 80      // the load error's first bytes
	recLen     = 256     // bytes a rank
	idOK       = 0       // byte of the id broadcast: 1 when rank 0 made an id
	idLen      = 4 + 128 // status and the id
)

func newComm(dev Device, boot Bootstrap, opts Options, load loader) (*Comm, error) {
	c := &Comm{dev: dev, boot: boot, rank: boot.Rank(), size: boot.Size(), poll: opts.Poll}
	if c.poll <= 0 {
		c.poll = time.Millisecond
	}
	all := func(err error) error { return &SetupError{AllRanks: true, Err: c.errorf("%w", err)} }

	// 1. Every rank loads NCCL and tells the others what it found.
	a, path, version, loadErr := load()
	rec := make([]byte, recLen)
	if loadErr == nil {
		rec[recOK] = 1
		binary.LittleEndian.PutUint32(rec[recVersion:], uint32(version))
	} else {
		copy(rec[recErr:], loadErr.Error())
	}
	binary.LittleEndian.PutUint32(rec[recOrdinal:], uint32(dev.Ordinal()))
	host, _ := os.Hostname()
	copy(rec[recHost:recErr], host)
	recs := make([]byte, c.size*recLen)
	if err := boot.AllGatherBytes(recs, rec); err != nil {
		return nil, fmt.Errorf("nccl rank %d of %d: exchange of the ranks' setup: %w", c.rank, c.size, err)
	}
	if err := checkPeers(recs, c.size); err != nil {
		if loadErr != nil {
			err = fmt.Errorf("%w (here: %v)", err, loadErr)
		}
		return nil, all(err)
	}
	c.api, c.path, c.version = a, path, version

	// 2. Rank 0 makes the unique id and broadcasts it.
	msg := make([]byte, idLen)
	var id UniqueID
	if c.rank == 0 {
		if r := a.getUniqueID(&id); r == ncclSuccess {
			msg[idOK] = 1
			copy(msg[4:], id[:])
		} else {
			binary.LittleEndian.PutUint32(msg[idOK:], uint32(r)<<8)
		}
	}
	if err := boot.BroadcastBytes(msg, 0); err != nil {
		return nil, fmt.Errorf("nccl rank %d of %d: broadcast of the unique id: %w", c.rank, c.size, err)
	}
	if msg[idOK] != 1 {
		r := result(binary.LittleEndian.Uint32(msg[idOK:]) >> 8)
		return nil, all(fmt.Errorf("rank 0's ncclGetUniqueId failed: %v: %s", r, a.getErrorString(r)))
	}
	copy(id[:], msg[4:])

	// 3. Every rank joins the communicator on its device.
	err := dev.OnStream(func(uintptr) error {
		return c.check("ncclCommInitRank", a.commInitRank(&c.comm, c.size, &id, c.rank))
	})
	if err != nil {
		return nil, c.errorf("on cuda:%d: %w", dev.Ordinal(), err)
	}
	one, err := dev.Alloc(kernels.F32, 1)
	if err != nil {
		c.abortComm()
		return nil, c.errorf("%w", err)
	}
	c.one = one
	return c, nil
}

// checkPeers reads every rank's setup record: an error names the ranks
// that could not load NCCL, a version that differs from rank 0's, or two
// ranks on one GPU of a host.
func checkPeers(recs []byte, size int) error {
	var failed []string
	rec := func(r int) []byte { return recs[r*recLen : (r+1)*recLen] }
	str := func(b []byte) string { s, _, _ := strings.Cut(string(b), "\x00"); return s }
	for r := range size {
		if rec(r)[recOK] != 1 {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, str(rec(r)[recErr:])))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("NCCL did not load on %d of %d ranks (%s)", len(failed), size, strings.Join(failed, "; "))
	}
	v0 := int(binary.LittleEndian.Uint32(rec(0)[recVersion:]))
	seen := map[string]int{}
	for r := range size {
		if v := int(binary.LittleEndian.Uint32(rec(r)[recVersion:])); v != v0 {
			return fmt.Errorf("rank 0 loaded NCCL %s, rank %d NCCL %s: every rank needs the same version", versionString(v0), r, versionString(v))
		}
		ord := int32(binary.LittleEndian.Uint32(rec(r)[recOrdinal:]))
		key := fmt.Sprintf("cuda:%d on %s", ord, str(rec(r)[recHost:recErr]))
		if q, dup := seen[key]; dup {
			return fmt.Errorf("ranks %d and %d both use %s: NCCL needs one GPU a rank (--device cuda lets each rank take the GPU of its local rank)", q, r, key)
		}
		seen[key] = r
	}
	return nil
}

// Rank implements dist.Comm.
func (c *Comm) Rank() int { return c.rank }

// Size implements dist.Comm.
func (c *Comm) Size() int { return c.size }

// Library describes the loaded NCCL: its path and version.
func (c *Comm) Library() string {
	return fmt.Sprintf("%s (NCCL %s)", c.path, versionString(c.version))
}

// Error is a failed NCCL call.
type Error struct {
	Func   string // the NCCL function, e.g. "ncclAllReduce"
	Code   int    // its ncclResult_t
	Name   string // the result's name, e.g. "ncclInvalidUsage"
	Msg    string // ncclGetErrorString of the result
	Detail string // ncclGetLastError: NCCL's message about the failure, may be empty
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d): %s", e.Func, e.Name, e.Code, e.Msg)
	if e.Detail != "" && e.Detail != e.Msg {
		s += ": " + e.Detail
	}
	return s
}

// check turns a result into an *Error (with the context current: NCCL's
// last error is the calling thread's).
func (c *Comm) check(fn string, r result) error {
	if r == ncclSuccess {
		return nil
	}
	return &Error{Func: fn, Code: int(r), Name: r.String(), Msg: c.api.getErrorString(r), Detail: c.api.getLastError(c.comm)}
}

// errorf wraps an error with the rank.
func (c *Comm) errorf(format string, args ...any) error {
	return fmt.Errorf("nccl rank %d of %d: %w", c.rank, c.size, fmt.Errorf(format, args...))
}

// ErrClosed is the error of a collective on a closed Comm.
var ErrClosed = errors.New("communicator is closed")

// begin locks the communicator for one call.
func (c *Comm) begin() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// asyncError returns the communicator's asynchronous error: a failure of
// queued work (a peer that died, a network error) NCCL found since.
func (c *Comm) asyncError() error {
	var async result
	if err := c.check("ncclCommGetAsyncError", c.api.commGetAsyncError(c.comm, &async)); err != nil {
		return err
	}
	if async != ncclSuccess && async != ncclInProgress {
		return c.check("ncclCommGetAsyncError (a queued collective failed)", async)
	}
	return nil
}

// launch queues fn's NCCL call on the device's stream and checks the
// communicator's asynchronous error.
func (c *Comm) launch(name string, f func(stream uintptr) result) error {
	err := c.dev.OnStream(func(s uintptr) error {
		if err := c.check(name, f(s)); err != nil {
			return err
		}
		return c.asyncError()
	})
	return err
}

// addrs returns the device addresses of bufs.
func (c *Comm) addrs(bufs ...kernels.Buffer) ([]uintptr, error) {
	ps := make([]uintptr, len(bufs))
	for i, b := range bufs {
		p, err := c.dev.Addr(b)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

// dataType checks a collective's dtype.
func dtypeOf(op string, dt kernels.DType) (dataType, error) {
	t, ok := ncclDataType(dt)
	if !ok {
		return 0, fmt.Errorf("%s of %v: only F32, BF16 and I32 are supported", op, dt)
	}
	return t, nil
}

// AllReduceSum implements dist.Comm: ncclAllReduce with ncclSum, in place.
func (c *Comm) AllReduceSum(buf kernels.Buffer) error {
	n := buf.Len()
	t, err := dtypeOf("all-reduce", buf.DType())
	if err != nil {
		return c.errorf("%w", err)
	}
	if err := c.begin(); err != nil {
		return c.errorf("all-reduce: %w", err)
	}
	defer c.mu.Unlock()
	if n == 0 {
		return nil
	}
	ps, err := c.addrs(buf)
	if err != nil {
		return c.errorf("all-reduce: %w", err)
	}
	if err := c.launch("ncclAllReduce", func(s uintptr) result {
		return c.api.allReduce(ps[0], ps[0], n, t, ncclSum, c.comm, s)
	}); err != nil {
		return c.errorf("all-reduce of %d %v elements: %w", n, buf.DType(), err)
	}
	return nil
}

// overlap reports whether [a, a+an) and [b, b+bn) share a byte.
func overlap(a uintptr, an int, b uintptr, bn int) bool {
	return an > 0 && bn > 0 && a < b+uintptr(bn) && b < a+uintptr(an)
}

// ReduceScatterSum implements dist.Comm: ncclReduceScatter with ncclSum;
// its count is n = out.Len(), the elements each rank receives. out may be
// in's block of this rank (NCCL's in-place form); any other overlap is an
// error.
func (c *Comm) ReduceScatterSum(out, in kernels.Buffer) error {
	n, dt := out.Len(), out.DType()
	t, err := dtypeOf("reduce-scatter", dt)
	if err != nil {
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
	ps, err := c.addrs(out, in)
	if err != nil {
		return c.errorf("reduce-scatter: %w", err)
	}
	es := dt.Size()
	if overlap(ps[0], n*es, ps[1], c.size*n*es) && ps[0] != ps[1]+uintptr(c.rank*n*es) {
		return c.errorf("reduce-scatter: out overlaps in other than as this rank's block (NCCL's in-place form)")
	}
	if err := c.launch("ncclReduceScatter", func(s uintptr) result {
		return c.api.reduceScatter(ps[1], ps[0], n, t, ncclSum, c.comm, s)
	}); err != nil {
		return c.errorf("reduce-scatter of %d %v elements a rank: %w", n, dt, err)
	}
	return nil
}

// AllGather implements dist.Comm: ncclAllGather; its count is n =
// in.Len(), the elements each rank sends. in may be out's block of this
// rank (NCCL's in-place form); any other overlap is an error.
func (c *Comm) AllGather(out, in kernels.Buffer) error {
	n, dt := in.Len(), in.DType()
	t, err := dtypeOf("all-gather", dt)
	if err != nil {
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
	ps, err := c.addrs(out, in)
	if err != nil {
		return c.errorf("all-gather: %w", err)
	}
	es := dt.Size()
	if overlap(ps[1], n*es, ps[0], c.size*n*es) && ps[1] != ps[0]+uintptr(c.rank*n*es) {
		return c.errorf("all-gather: in overlaps out other than as this rank's block (NCCL's in-place form)")
	}
	if err := c.launch("ncclAllGather", func(s uintptr) result {
		return c.api.allGather(ps[1], ps[0], n, t, c.comm, s)
	}); err != nil {
		return c.errorf("all-gather of %d %v elements a rank: %w", n, dt, err)
	}
	return nil
}

// Broadcast implements dist.Comm: ncclBroadcast, in place.
func (c *Comm) Broadcast(buf kernels.Buffer, root int) error {
	n := buf.Len()
	t, err := dtypeOf("broadcast", buf.DType())
	if err != nil {
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
	ps, err := c.addrs(buf)
	if err != nil {
		return c.errorf("broadcast: %w", err)
	}
	if err := c.launch("ncclBroadcast", func(s uintptr) result {
		return c.api.broadcast(ps[0], ps[0], n, t, root, c.comm, s)
	}); err != nil {
		return c.errorf("broadcast of %d %v elements from rank %d: %w", n, buf.DType(), root, err)
	}
	return nil
}

// Barrier implements dist.Comm: an all-reduce of one element on the
// stream, then a wait for the stream. It returns when every rank has
// reached it and, more than an MPI barrier would say, when the work every
// rank queued on its GPU before it has finished: a rank's all-reduce
// cannot finish before every rank's stream reached it. It needs no second
// transport beside NCCL (the MPI thread stays idle), and the wait polls
// NCCL's asynchronous error, so a failed peer ends it with an error.
func (c *Comm) Barrier() error {
	if err := c.begin(); err != nil {
		return c.errorf("barrier: %w", err)
	}
	defer c.mu.Unlock()
	p, err := c.dev.Addr(c.one)
	if err != nil {
		return c.errorf("barrier: %w", err)
	}
	if err := c.launch("ncclAllReduce", func(s uintptr) result {
		return c.api.allReduce(p, p, 1, ncclFloat32, ncclSum, c.comm, s)
	}); err != nil {
		return c.errorf("barrier: %w", err)
	}
	if err := c.wait(); err != nil {
		return c.errorf("barrier: %w", err)
	}
	return nil
}

// wait polls the stream until its work has finished, checking NCCL's
// asynchronous error between looks (a plain stream synchronize would hang
// on a collective whose peer failed).
func (c *Comm) wait() error {
	pause := 10 * time.Microsecond
	for {
		done, err := c.dev.StreamDone()
		if err != nil {
			return err
		}
		if err := c.dev.OnStream(func(uintptr) error { return c.asyncError() }); err != nil {
			return err
		}
		if done {
			return nil
		}
		time.Sleep(pause)
		pause = min(2*pause, c.poll)
	}
}

// Close waits for the queued work, finalizes and destroys the NCCL
// communicator (ncclCommFinalize, collective: every rank closes;
// ncclCommDestroy), then closes the bootstrap when it is an io.Closer
// (MPI_Finalize). Later collectives fail; Close again is a no-op.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.wait()
	c.dev.Free(c.one)
	c.one = nil
	if derr := c.dev.OnStream(func(uintptr) error {
		if err := c.check("ncclCommFinalize", c.api.commFinalize(c.comm)); err != nil {
			c.api.commAbort(c.comm)
			return err
		}
		return c.check("ncclCommDestroy", c.api.commDestroy(c.comm))
	}); err == nil {
		err = derr
	}
	c.comm = 0
	if cl, ok := c.boot.(io.Closer); ok {
		if cerr := cl.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return c.errorf("close: %w", err)
	}
	return nil
}

// abortComm ends the NCCL communicator without waiting for its peers
// (ncclCommAbort), within 10 s.
func (c *Comm) abortComm() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.dev.OnStream(func(uintptr) error {
			c.api.commAbort(c.comm)
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Abort ends every rank of the job with code and does not return: it
// aborts the NCCL communicator (ncclCommAbort: its kernels stop waiting
// for peers), then the bootstrap through its Abort(code) (MPI_Abort) when
// it has one, else exits. Call it on a fatal error so that no other rank
// waits forever in a collective this rank will not join.
func (c *Comm) Abort(code int) {
	if c.comm != 0 {
		c.abortComm()
	}
	if a, ok := c.boot.(interface{ Abort(int) }); ok {
		a.Abort(code)
	}
	os.Exit(code)
}
