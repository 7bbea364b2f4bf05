//go:build linux

package cli

import (
	"runtime"
	"testing"
)

// TestReleaseMemoryRestartsPeak: after a step's buffers become garbage,
// releaseMemory returns them to the operating system and the peak RSS
// restarts from what the process holds, so `gochat train` logs each step's
// own peak and the next step's pre-flight sees the memory free.
func TestReleaseMemoryRestartsPeak(t *testing.T) {
	const n = 256 << 20
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	before := peakRSS()
	if before < n {
		t.Fatalf("peak RSS %d with %d bytes touched", before, n)
	}
	runtime.KeepAlive(b)
	b = nil
	releaseMemory()
	if after := peakRSS(); after > before-n/2 {
		t.Errorf("peak RSS %d after releasing %d of %d bytes", after, n, before)
	}
}
