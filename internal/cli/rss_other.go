//go:build !unix

package cli

import "runtime/debug"

// peakRSS is unknown on this platform.
func peakRSS() int64 { return 0 }

// releaseMemory hands what the process no longer uses back to the
// operating system.
func releaseMemory() { debug.FreeOSMemory() }
