package mpi

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
)

// sysDL is the dynamic loader through purego (no cgo). Libraries are
// opened RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols from the
// global scope.
type sysDL struct{}

func (sysDL) open(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func (sysDL) sym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }

// offHeap is memory mapped outside Go's heap: the garbage collector never
// scans or moves it and C code may keep its address.
type offHeap struct{ mem []byte }

// mapOffHeap maps size bytes (rounded up to pages) of zeroed anonymous
// memory and asks for transparent huge pages (MADV_HUGEPAGE; on this
// project's machine THP is in "madvise" mode, and 64 MiB allreduces run
// about 20% faster from huge pages). A refused madvise changes nothing.
func mapOffHeap(size int) (offHeap, error) {
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return offHeap{}, fmt.Errorf("mmap of %d bytes: %w", size, err)
	}
	if size >= 4<<20 {
		_ = syscall.Madvise(mem, 14 /* MADV_HUGEPAGE */)
	}
	return offHeap{mem: mem}, nil
}

// unmap returns the memory; the region must not be used afterwards.
func (m *offHeap) unmap() error {
	if m.mem == nil {
		return nil
	}
	err := syscall.Munmap(m.mem)
	m.mem = nil
	return err
}

// addr is the address of byte off, for C.
func (m offHeap) addr(off int) uintptr { return uintptr(unsafe.Pointer(&m.mem[off])) }

// kernelSigaction is the kernel's struct sigaction, kept as opaque bytes:
// it is read and written back unchanged (32 bytes on amd64 and arm64:
// handler, flags, restorer, mask).
type kernelSigaction [4]uint64

// signalHandlers is the process's signal dispositions, 1..64.
type signalHandlers struct {
	act [65]kernelSigaction
	ok  [65]bool
}

// saveSignals reads every signal's disposition with rt_sigaction. MPI
// libraries install their own handlers (MPICH's UCX replaces SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGHUP at dlopen and SIGUSR1 at MPI_Init), which
// turns Go's recoverable runtime errors into crashes; restore puts Go's
// back.
func saveSignals() *signalHandlers {
	s := &signalHandlers{}
	for sig := 1; sig <= 64; sig++ {
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&s.act[sig])), 8, 0, 0)
		s.ok[sig] = errno == 0
	}
	return s
}

// restore writes back every saved disposition that changed since
// saveSignals and returns the signals it restored.
func (s *signalHandlers) restore() []int {
	var changed []int
	for sig := 1; sig <= 64; sig++ {
		if !s.ok[sig] {
			continue
		}
		var now kernelSigaction
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&now)), 8, 0, 0); errno != 0 {
			continue
		}
		if now == s.act[sig] {
			continue
		}
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&s.act[sig])), 0, 8, 0, 0); errno == 0 {
			changed = append(changed, sig)
		}
	}
	return changed
}
