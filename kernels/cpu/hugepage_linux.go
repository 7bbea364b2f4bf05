package cpu

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks Linux to back the whole 2 MiB pages inside a large
// buffer with huge pages (madvise MADV_HUGEPAGE; with transparent huge
// pages in the common "madvise" mode nothing does that for Go's heap).
// Streaming a model's weights — decoding reads every weight once a token —
// then takes one TLB entry per 2 MiB instead of per 4 KiB: opt-125m decodes
// about 20% faster in fp32 and in bf16 on this project's machine. Memory
// the allocation already touched keeps its small pages (the kernel may
// collapse them later); a refusal (no THP support) changes nothing.
func adviseHuge(p unsafe.Pointer, size int) {
	const huge = 2 << 20
	if size < 2*huge {
		return
	}
	lo := int((huge - uintptr(p)%huge) % huge) // first huge-page boundary, as an offset
	hi := lo + (size-lo)/huge*huge
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(p), size)[lo:hi], 14 /* MADV_HUGEPAGE */)
}
