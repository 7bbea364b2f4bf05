//go:build linux && amd64

package cpu

import "syscall"

// Linux's arch_prctl request for an extended feature (arch/x86/include/
// uapi/asm/prctl.h) and the AMX tile data feature (XFEATURE_XTILEDATA).
const (
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// gemmAMXPermit asks Linux for the AMX tile data state for this process
// (all its threads, present and future) and reports whether it was
// granted. It fails on kernels before 5.16 (EINVAL), when a thread's
// alternate signal stack is too small for the larger signal frame
// (ENOSPC), and when the feature is not enabled.
func gemmAMXPermit() bool {
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return errno == 0
}
