//go:build !linux

package cpu

import "unsafe"

// adviseHuge does nothing here (see the Linux version).
func adviseHuge(p unsafe.Pointer, size int) {}
