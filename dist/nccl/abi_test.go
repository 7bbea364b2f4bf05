package nccl

import (
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

func testID() *UniqueID {
	id := new(UniqueID)
	for i := range id {
		id[i] = byte(i*37 + 11)
	}
	return id
}

// The argument layout of ncclCommInitRank, word by word, as abi_*.go
// explains it.
func TestCommInitRankLayout(t *testing.T) {
	id := testID()
	const comm, addr = 0xc0ffee, 0xadd4
	got := commInitRankArgs(comm, 8, 5, id, addr)
	switch runtime.GOARCH {
	case "amd64":
		// RDI comm, RSI nranks, RDX rank, RCX/R8/R9 unused, then the id's 16
		// eightbytes on the stack in order.
		want := []uintptr{comm, 8, 5, 0, 0, 0}
		for i := 0; i < 128; i += 8 {
			want = append(want, uintptr(binary.LittleEndian.Uint64(id[i:])))
		}
		if !slices.Equal(got, want) {
			t.Errorf("layout %x\nwant %x", got, want)
		}
		if len(got) > 32 {
			t.Errorf("%d arguments: SyscallN takes 32", len(got))
		}
	case "arm64":
		// X0 comm, W1 nranks, X2 the copy's address, W3 rank.
		if want := []uintptr{comm, 8, addr, 5}; !slices.Equal(got, want) {
			t.Errorf("layout %x, want %x", got, want)
		}
	default:
		t.Skipf("no ncclCommInitRank layout on %s", runtime.GOARCH)
	}
}

// cUniqueID is ncclUniqueId as purego describes a C struct.
type cUniqueID struct{ Internal [128]byte }

// The production call path (lib.commInitRank: the copy, callInitRank,
// commInitRankArgs, SyscallN) into a C-ABI function that purego builds
// with ncclCommInitRank's prototype, a struct taken by value: the callee
// sees the comm pointer, nranks, the 128 bytes and rank where the
// platform's C ABI puts them, and its write through comm arrives.
func TestCommInitRankThroughTheCABI(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("purego callbacks with struct arguments need linux on amd64 or arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	type seen struct {
		nranks, rank int32
		id           [128]byte
	}
	var got seen
	fn := purego.NewCallback(func(comm *uintptr, nranks int32, id cUniqueID, rank int32) int32 {
		got = seen{nranks, rank, id.Internal}
		*comm = 0xbeef
		return 0
	})
	id := testID()
	l := &lib{ncclCommInitRank: fn}
	var comm uintptr
	if r := l.commInitRank(&comm, 8, id, 5); r != ncclSuccess {
		t.Fatalf("result %v", r)
	}
	if got.nranks != 8 || got.rank != 5 || got.id != *id || comm != 0xbeef {
		t.Errorf("the callee saw nranks %d, rank %d, id equal %v; comm %#x", got.nranks, got.rank, got.id == *id, comm)
	}
}

// cDL resolves ncclGetVersion to a C-ABI function reporting version, and
// every other symbol to an address that is never called; missing names
// fail.
type cDL struct {
	getVersion uintptr
	missing    string
}

func (d cDL) open(p string) (uintptr, error) {
	if strings.Contains(p, "absent") {
		return 0, errors.New(p + ": cannot open shared object file")
	}
	return 1, nil
}

func (d cDL) sym(_ uintptr, name string) (uintptr, error) {
	switch name {
	case d.missing:
		return 0, errors.New("undefined symbol " + name)
	case "ncclGetVersion":
		return d.getVersion, nil
	}
	return 0x1000, nil
}

func versionFn(code int32) uintptr {
	return purego.NewCallback(func(v *int32) int32 {
		*v = code
		return 0
	})
}

// openLib takes the first library that loads, has the functions and is
// 2.10 or later, and says why each other one was refused.
func TestOpenLib(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("purego callbacks")
	}
	v2275, v284 := versionFn(22705), versionFn(2804)
	l, v, err := openLib(cDL{getVersion: v2275}, []string{"/absent/libnccl.so.2", "/ok/libnccl.so.2"})
	if err != nil || l.path != "/ok/libnccl.so.2" || v != 22705 || l.ncclCommFinalize == 0 {
		t.Fatalf("openLib: %+v %d %v", l, v, err)
	}
	_, _, err = openLib(cDL{getVersion: v284}, []string{"/old/libnccl.so.2"})
	if err == nil || !strings.Contains(err.Error(), "NCCL 2.8.4: gochat needs 2.10 or later") {
		t.Errorf("an old NCCL: %v", err)
	}
	_, _, err = openLib(cDL{getVersion: v2275, missing: "ncclReduceScatter"}, []string{"/x/libnccl.so.2"})
	var le *LoadError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "ncclReduceScatter is missing") || !strings.Contains(err.Error(), "GOCHAT_NCCL_LIB") {
		t.Errorf("a library without ncclReduceScatter: %v", err)
	}
	// Optional functions may be missing (NCCL 2.10 to 2.13).
	l, _, err = openLib(cDL{getVersion: v2275, missing: "ncclCommFinalize"}, []string{"/x/libnccl.so.2"})
	if err != nil || l.ncclCommFinalize != 0 || l.commFinalize(0) != ncclSuccess {
		t.Errorf("without ncclCommFinalize: %v", err)
	}
}
