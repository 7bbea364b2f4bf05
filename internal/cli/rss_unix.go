//go:build unix

package cli

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
)

// peakRSS is the process's peak resident set size in bytes since it
// started or since the last resetPeakRSS: Linux's VmHWM, else getrusage's
// maximum (which cannot be reset).
func peakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
				f := bytes.Fields(rest) // "123456 kB"
				if len(f) == 2 && string(f[1]) == "kB" {
					if kb, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
						return kb * 1024
					}
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return ru.Maxrss // bytes on macOS
	}
	return ru.Maxrss * 1024 // KiB on Linux
}

// releaseMemory hands what the process no longer uses back to the
// operating system — a collection, then the freed spans returned — and
// restarts the peak resident set size from the current one (Linux:
// clear_refs 5), so that the next step of `gochat train` sees the
// machine's memory as it is (its pre-flight reads MemAvailable) and logs
// its own peak, not an earlier step's.
func releaseMemory() {
	debug.FreeOSMemory()                                      // collects first
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM; absent elsewhere
}
