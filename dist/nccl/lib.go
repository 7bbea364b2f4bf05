package nccl

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gochat-ai/gochat/kernels"
)

// UniqueID is an ncclUniqueId: the 128 bytes (NCCL_UNIQUE_ID_BYTES) rank 0
// makes with ncclGetUniqueId and every rank passes to ncclCommInitRank.
type UniqueID [128]byte

// result is an ncclResult_t.
type result int32

// The ncclResult_t values of nccl.h.
const (
	ncclSuccess         result = 0
	ncclInvalidArgument result = 4
	ncclInvalidUsage    result = 5
	ncclInProgress      result = 7
)

// resultNames are the ncclResult_t names of nccl.h (2.28).
var resultNames = [...]string{
	"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout",
}

func (r result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult_t(%d)", int32(r))
}

// dataType is an ncclDataType_t.
type dataType int32

// The ncclDataType_t values gochat uses (nccl.h: ncclInt32 = 2,
// ncclFloat32 = 7, ncclBfloat16 = 9 since NCCL 2.10).
const (
	ncclInt32    dataType = 2
	ncclFloat32  dataType = 7
	ncclBfloat16 dataType = 9
)

// ncclDataType maps a buffer's DType to NCCL's; ok is false for the
// DTypes NCCL does not move here.
func ncclDataType(dt kernels.DType) (dataType, bool) {
	switch dt {
	case kernels.F32:
		return ncclFloat32, true
	case kernels.BF16:
		return ncclBfloat16, true
	case kernels.I32:
		return ncclInt32, true
	}
	return 0, false
}

// redOp is an ncclRedOp_t; gochat sums.
type redOp int32

const ncclSum redOp = 0

// minVersion is the oldest NCCL gochat loads: 2.10 brought ncclBfloat16.
const minVersion = 21000

// versionString decodes ncclGetVersion's code: NCCL_VERSION(X,Y,Z) of
// nccl.h is X·1000 + Y·100 + Z up to 2.8 and X·10000 + Y·100 + Z since
// 2.9.
func versionString(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

// versionCode returns code in the 2.9+ encoding, so that codes of both
// encodings compare.
func versionCode(code int) int {
	if code < 10000 {
		return code/1000*10000 + code%1000
	}
	return code
}

// api is the NCCL functions a Comm calls, with their C arguments: device
// addresses, handles and Go pointers for the out-parameters. lib
// implements it with the loaded library; the tests' fake performs the
// collectives across in-process ranks over host memory, so the Comm's
// logic (dtype and count mapping, addresses of views, in-place forms, the
// stream, the bootstrap order, error mapping) is tested without a GPU.
type api interface {
	getVersion(version *int32) result
	getUniqueID(id *UniqueID) result
	commInitRank(comm *uintptr, nranks int, id *UniqueID, rank int) result
	allReduce(send, recv uintptr, count int, dt dataType, op redOp, comm, stream uintptr) result
	// reduceScatter's count is recvcount: the elements each rank receives.
	reduceScatter(send, recv uintptr, recvCount int, dt dataType, op redOp, comm, stream uintptr) result
	// allGather's count is sendcount: the elements each rank sends.
	allGather(send, recv uintptr, sendCount int, dt dataType, comm, stream uintptr) result
	broadcast(send, recv uintptr, count int, dt dataType, root int, comm, stream uintptr) result
	commGetAsyncError(comm uintptr, async *result) result
	// commFinalize is ncclSuccess where the library has none (before 2.14).
	commFinalize(comm uintptr) result
	commDestroy(comm uintptr) result
	commAbort(comm uintptr) result
	getErrorString(r result) string
	// getLastError is NCCL's message about the last error ("" before 2.13).
	getLastError(comm uintptr) string
}

// dlopener is the dynamic loader: purego's on Linux, a stub elsewhere.
type dlopener interface {
	open(path string) (uintptr, error)
	sym(lib uintptr, name string) (uintptr, error)
}

// lib is a loaded libnccl: the addresses of the functions gochat calls.
type lib struct {
	path string

	ncclGetVersion, ncclGetUniqueId, ncclCommInitRank              uintptr
	ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast uintptr
	ncclCommGetAsyncError, ncclCommFinalize, ncclCommDestroy       uintptr
	ncclCommAbort, ncclGetErrorString, ncclGetLastError            uintptr
}

var _ api = (*lib)(nil)

// symbols are the functions lib binds; the optional ones came after 2.10
// (ncclGetLastError 2.13, ncclCommFinalize 2.14).
func (l *lib) symbols() []struct {
	name     string
	dst      *uintptr
	optional bool
} {
	return []struct {
		name     string
		dst      *uintptr
		optional bool
	}{
		{"ncclGetVersion", &l.ncclGetVersion, false},
		{"ncclGetUniqueId", &l.ncclGetUniqueId, false},
		{"ncclCommInitRank", &l.ncclCommInitRank, false},
		{"ncclAllReduce", &l.ncclAllReduce, false},
		{"ncclReduceScatter", &l.ncclReduceScatter, false},
		{"ncclAllGather", &l.ncclAllGather, false},
		{"ncclBroadcast", &l.ncclBroadcast, false},
		{"ncclCommGetAsyncError", &l.ncclCommGetAsyncError, false},
		{"ncclCommDestroy", &l.ncclCommDestroy, false},
		{"ncclCommAbort", &l.ncclCommAbort, false},
		{"ncclGetErrorString", &l.ncclGetErrorString, false},
		{"ncclCommFinalize", &l.ncclCommFinalize, true},
		{"ncclGetLastError", &l.ncclGetLastError, true},
	}
}

// errNotNCCL marks a library that loaded but lacks a function.
var errNotNCCL = errors.New("not an NCCL library")

// LoadError is the error of a process that could not load NCCL.
type LoadError struct {
	Tried []string // libraries tried, in order
	Errs  []error  // why each failed
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("nccl: no usable libnccl")
	if len(e.Tried) == 0 {
		b.WriteString(" (nothing to try)")
	} else {
		b.WriteString(" (")
		for i, t := range e.Tried {
			if i > 0 {
				b.WriteString("; ")
			}
			if msg := fmt.Sprint(e.Errs[i]); strings.HasPrefix(msg, t+":") {
				b.WriteString(msg) // dlopen's messages start with the path
			} else {
				fmt.Fprintf(&b, "%s: %s", t, msg)
			}
		}
		b.WriteString(")")
	}
	b.WriteString(": pip install nvidia-nccl-cu12 (torch brings it), or set GOCHAT_NCCL_LIB to the path of libnccl.so.2")
	return b.String()
}

// openLib loads the first candidate that dlopens, exports the functions
// and is NCCL 2.10 or later; it returns the library and its version code.
func openLib(dl dlopener, cands []string) (*lib, int, error) {
	le := &LoadError{}
	for _, p := range cands {
		l, v, err := bindLib(dl, p)
		if err == nil {
			return l, v, nil
		}
		le.Tried = append(le.Tried, p)
		le.Errs = append(le.Errs, err)
	}
	return nil, 0, le
}

func bindLib(dl dlopener, path string) (*lib, int, error) {
	h, err := dl.open(path)
	if err != nil {
		return nil, 0, err
	}
	l := &lib{path: path}
	for _, s := range l.symbols() {
		p, err := dl.sym(h, s.name)
		if err != nil || p == 0 {
			if s.optional {
				continue
			}
			return nil, 0, fmt.Errorf("%w: %s is missing", errNotNCCL, s.name)
		}
		*s.dst = p
	}
	var v int32
	if r := l.getVersion(&v); r != ncclSuccess {
		return nil, 0, fmt.Errorf("ncclGetVersion: %v", r)
	}
	if versionCode(int(v)) < minVersion {
		return nil, 0, fmt.Errorf("NCCL %s: gochat needs 2.10 or later (bfloat16 collectives)", versionString(int(v)))
	}
	return l, int(v), nil
}

// call runs one NCCL function and returns its ncclResult_t (a C enum: the
// low 32 bits). Pointer arguments are converted to uintptr in the call
// expression (uintptr(unsafe.Pointer(p))): go:uintptrescapes keeps what
// they point to alive, and on the heap, until the function returns.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) result {
	r, _, _ := purego.SyscallN(fn, args...)
	return result(int32(r))
}

func (l *lib) getVersion(v *int32) result {
	return call(l.ncclGetVersion, uintptr(unsafe.Pointer(v)))
}

func (l *lib) getUniqueID(id *UniqueID) result {
	return call(l.ncclGetUniqueId, uintptr(unsafe.Pointer(id)))
}

// commInitRank calls ncclCommInitRank(ncclComm_t* comm, int nranks,
// ncclUniqueId commId, int rank), whose id is a 128-byte struct passed
// by value; commInitRankArgs (abi_*.go) lays the arguments out as the
// platform's C ABI passes such a struct.
func (l *lib) commInitRank(comm *uintptr, nranks int, id *UniqueID, rank int) result {
	cp := new(UniqueID) // the callee's copy (AAPCS64 passes its address)
	*cp = *id
	return callInitRank(l.ncclCommInitRank, uintptr(unsafe.Pointer(comm)), nranks, rank, cp, uintptr(unsafe.Pointer(cp)))
}

// callInitRank calls ncclCommInitRank with the arguments laid out by
// commInitRankArgs. comm and idAddr (the address of id) are converted in
// the caller's call expression: go:uintptrescapes keeps both on the heap
// and alive until the call returns, so the C side may read them.
//
//go:uintptrescapes
func callInitRank(fn, comm uintptr, nranks, rank int, id *UniqueID, idAddr uintptr) result {
	return call(fn, commInitRankArgs(comm, nranks, rank, id, idAddr)...)
}

func (l *lib) allReduce(send, recv uintptr, count int, dt dataType, op redOp, comm, stream uintptr) result {
	return call(l.ncclAllReduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), comm, stream)
}

func (l *lib) reduceScatter(send, recv uintptr, recvCount int, dt dataType, op redOp, comm, stream uintptr) result {
	return call(l.ncclReduceScatter, send, recv, uintptr(recvCount), uintptr(dt), uintptr(op), comm, stream)
}

func (l *lib) allGather(send, recv uintptr, sendCount int, dt dataType, comm, stream uintptr) result {
	return call(l.ncclAllGather, send, recv, uintptr(sendCount), uintptr(dt), comm, stream)
}

func (l *lib) broadcast(send, recv uintptr, count int, dt dataType, root int, comm, stream uintptr) result {
	return call(l.ncclBroadcast, send, recv, uintptr(count), uintptr(dt), uintptr(root), comm, stream)
}

func (l *lib) commGetAsyncError(comm uintptr, async *result) result {
	return call(l.ncclCommGetAsyncError, comm, uintptr(unsafe.Pointer(async)))
}

func (l *lib) commFinalize(comm uintptr) result {
	if l.ncclCommFinalize == 0 {
		return ncclSuccess
	}
	return call(l.ncclCommFinalize, comm)
}

func (l *lib) commDestroy(comm uintptr) result { return call(l.ncclCommDestroy, comm) }
func (l *lib) commAbort(comm uintptr) result   { return call(l.ncclCommAbort, comm) }

func (l *lib) getErrorString(r result) string {
	p, _, _ := purego.SyscallN(l.ncclGetErrorString, uintptr(r))
	return goString(p)
}

func (l *lib) getLastError(comm uintptr) string {
	if l.ncclGetLastError == 0 {
		return ""
	}
	p, _, _ := purego.SyscallN(l.ncclGetLastError, comm)
	return goString(p)
}

// goString copies the NUL-terminated C string at p (nil: ""), at most 4
// KiB of it.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i)) // C memory, not Go's
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
