//go:build amd64 && !linux

package cpu

// gemmAMXPermit reports false: AMX is only used on Linux, where the
// process asks for it with arch_prctl.
func gemmAMXPermit() bool { return false }
