//go:build !linux

package cpu

import "unsafe"

// adviseHuge does nothing here (see the Linux version).
func adviseHuge(p unsafe.Pointer, size int) {}

// releasePages releases nothing here: the caller zeroes all of it.
func releasePages(p unsafe.Pointer, size int) (head, tail int) { return size, 0 }
