//go:build !unix

package cli

// peakRSS is unknown on this platform.
func peakRSS() int64 { return 0 }
