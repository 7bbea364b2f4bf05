package mpi

import (
	"os"
	"strings"
	"unsafe"
)

// ProbeResult is what Probe found: the library New would load, its ABI and
// version string, or why none loads.
type ProbeResult struct {
	Path    string
	Flavour Flavour
	Version string // MPI_Get_library_version's first line
	Err     error
}

// Probe loads the MPI library New would (GOCHAT_MPI_LIB or the
// candidates) without initializing MPI, for `gochat env`. It restores the
// signal handlers the library installs when it loads.
func Probe() ProbeResult {
	sigs := saveSignals()
	defer sigs.restore()
	lib, err := openLibrary(sysDL{}, candidates(os.Getenv(EnvLib), DetectLaunch()))
	if err != nil {
		return ProbeResult{Err: err}
	}
	r := ProbeResult{Path: lib.path, Flavour: lib.flavour}
	buf := make([]byte, 8192) // MPI_MAX_LIBRARY_VERSION_STRING
	var n int32
	if code := call(lib.getLibraryVersion, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n))); code == mpiSuccess && n > 0 && int(n) <= len(buf) {
		v := strings.TrimRight(string(buf[:n]), "\x00\n ")
		r.Version, _, _ = strings.Cut(v, "\n")
		if err := checkVersion(lib.flavour, v); err != nil {
			r.Err = err
		}
	}
	return r
}
