package mpi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

// Flavour is an MPI ABI: the library's handle representation.
type Flavour int

// The ABIs this package knows the handles of.
const (
	// OpenMPI: handles are addresses of exported globals (libmpi.so.40).
	OpenMPI Flavour = iota + 1
	// MPICH: handles are 32-bit integers fixed by mpi.h; Intel MPI and
	// MVAPICH share this ABI (libmpich.so.12, libmpi.so.12).
	MPICH
)

func (f Flavour) String() string {
	switch f {
	case OpenMPI:
		return "Open MPI"
	case MPICH:
		return "MPICH"
	}
	return fmt.Sprintf("Flavour(%d)", int(f))
}

// InstallHint is the package a missing or broken library error points to.
const InstallHint = "apt-get install openmpi-bin libopenmpi-dev"

// EnvLib names the variable that overrides library discovery with a path
// (or soname) to dlopen.
const EnvLib = "GOCHAT_MPI_LIB"

// Candidate libraries, tried in order when GOCHAT_MPI_LIB is unset: bare
// sonames go through the dynamic loader's search (LD_LIBRARY_PATH,
// ld.so.cache: Debian/Ubuntu put both libraries there), full paths cover
// distributions that keep them in a per-implementation folder (Fedora/RHEL
// environment modules) and /opt installs.
var (
	openMPICandidates = []string{
		"libmpi.so.40",
		"/usr/lib64/openmpi/lib/libmpi.so.40",
		"/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40",
		"/opt/openmpi/lib/libmpi.so.40",
		"/usr/local/lib/libmpi.so.40",
	}
	mpichCandidates = []string{
		"libmpich.so.12",
		"libmpi.so.12",
		"/usr/lib64/mpich/lib/libmpich.so.12",
		"/opt/mpich/lib/libmpich.so.12",
		"/usr/local/lib/libmpich.so.12",
	}
)

// candidates returns the libraries to try: GOCHAT_MPI_LIB alone when set
// (a wrong override is an error, not a silent fallback), else Open MPI's
// then MPICH's, MPICH's first when an MPICH-family launcher started the
// process (a rank that loaded the other implementation would run alone).
func candidates(override string, l Launch) []string {
	if override != "" {
		return []string{override}
	}
	if l.Launched() && !l.OpenMPI {
		return append(append([]string{}, mpichCandidates...), openMPICandidates...)
	}
	return append(append([]string{}, openMPICandidates...), mpichCandidates...)
}

// LoadError is the error of a process that could not load any MPI library.
type LoadError struct {
	Tried []string // libraries tried, in order
	Errs  []error  // why each failed
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("mpi: no usable MPI library (")
	for i, t := range e.Tried {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", t, e.Errs[i])
	}
	fmt.Fprintf(&b, "): install Open MPI (%s) or set %s to the path of libmpi.so.40 / libmpich.so.12", InstallHint, EnvLib)
	return b.String()
}

// handles are the predefined MPI objects gochat uses, as the values the
// library's C functions take. They are integers or addresses of C globals,
// never Go pointers: they are kept in uintptr (an integer handle in an
// unsafe.Pointer crashes the garbage collector when the stack grows).
type handles struct {
	commWorld    uintptr // MPI_COMM_WORLD
	float        uintptr // MPI_FLOAT
	int32        uintptr // MPI_INT32_T
	uint16       uintptr // MPI_UINT16_T
	byte         uintptr // MPI_BYTE
	sum          uintptr // MPI_SUM
	errorsReturn uintptr // MPI_ERRORS_RETURN
	inPlace      uintptr // MPI_IN_PLACE
}

// mpichHandles are MPICH's handle constants, read from its mpi.h
// (libmpich-dev 4.0.2, usr/include/x86_64-linux-gnu/mpich/mpi.h): every
// MPICH-ABI library (Intel MPI, MVAPICH) has the same values.
var mpichHandles = handles{
	commWorld:    0x44000000,  // #define MPI_COMM_WORLD ((MPI_Comm)0x44000000)
	float:        0x4c00040a,  // #define MPI_FLOAT ((MPI_Datatype)0x4c00040a)
	int32:        0x4c000439,  // #define MPI_INT32_T ((MPI_Datatype)0x4c000439)
	uint16:       0x4c00023c,  // #define MPI_UINT16_T ((MPI_Datatype)0x4c00023c)
	byte:         0x4c00010d,  // #define MPI_BYTE ((MPI_Datatype)0x4c00010d)
	sum:          0x58000003,  // #define MPI_SUM (MPI_Op)(0x58000003)
	errorsReturn: 0x54000001,  // #define MPI_ERRORS_RETURN ((MPI_Errhandler)0x54000001)
	inPlace:      ^uintptr(0), // #define MPI_IN_PLACE (void *) -1
}

// openMPIGlobals are the exported globals whose addresses are Open MPI's
// handles (OMPI_PREDEFINED_GLOBAL(type, global) is &global in its mpi.h,
// Open MPI 4.1.4, usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h);
// MPI_IN_PLACE is ((void *) 1) there.
var openMPIGlobals = []struct {
	name string
	dst  func(*handles) *uintptr
}{
	{"ompi_mpi_comm_world", func(h *handles) *uintptr { return &h.commWorld }},
	{"ompi_mpi_float", func(h *handles) *uintptr { return &h.float }},
	{"ompi_mpi_int32_t", func(h *handles) *uintptr { return &h.int32 }},
	{"ompi_mpi_uint16_t", func(h *handles) *uintptr { return &h.uint16 }},
	{"ompi_mpi_byte", func(h *handles) *uintptr { return &h.byte }},
	{"ompi_mpi_op_sum", func(h *handles) *uintptr { return &h.sum }},
	{"ompi_mpi_errors_return", func(h *handles) *uintptr { return &h.errorsReturn }},
}

// MPI thread-support levels (the same in both ABIs).
const threadFunneled = 1

// mpiSuccess is MPI_SUCCESS.
const mpiSuccess = 0

// library is a loaded MPI: its path, ABI, handles and the C functions
// gochat calls (addresses for purego.SyscallN).
type library struct {
	path    string
	flavour Flavour
	h       handles

	initThread, initialized, finalize, finalized, abort       uintptr
	commRank, commSize, commSetErrhandler, errorString        uintptr
	getLibraryVersion                                         uintptr
	allreduce, reduceScatterBlock, allgatherv, bcast, barrier uintptr
}

// functions lists the C functions a library must export.
func (l *library) functions() []struct {
	name string
	dst  *uintptr
} {
	return []struct {
		name string
		dst  *uintptr
	}{
		{"MPI_Init_thread", &l.initThread},
		{"MPI_Initialized", &l.initialized},
		{"MPI_Finalize", &l.finalize},
		{"MPI_Finalized", &l.finalized},
		{"MPI_Abort", &l.abort},
		{"MPI_Comm_rank", &l.commRank},
		{"MPI_Comm_size", &l.commSize},
		{"MPI_Comm_set_errhandler", &l.commSetErrhandler},
		{"MPI_Error_string", &l.errorString},
		{"MPI_Get_library_version", &l.getLibraryVersion},
		{"MPI_Allreduce", &l.allreduce},
		{"MPI_Reduce_scatter_block", &l.reduceScatterBlock},
		{"MPI_Allgatherv", &l.allgatherv},
		{"MPI_Bcast", &l.bcast},
		{"MPI_Barrier", &l.barrier},
	}
}

// dlopener is the dynamic loader: purego's on Linux, a stub elsewhere.
type dlopener interface {
	open(path string) (uintptr, error)
	sym(lib uintptr, name string) (uintptr, error)
}

// openLibrary loads the first candidate that dlopens and exports the MPI
// functions gochat needs, and resolves its handles.
func openLibrary(dl dlopener, cands []string) (*library, error) {
	le := &LoadError{}
	for _, path := range cands {
		lib, err := bind(dl, path)
		if err == nil {
			return lib, nil
		}
		le.Tried = append(le.Tried, path)
		le.Errs = append(le.Errs, err)
	}
	return nil, le
}

// errNotMPI marks a library that loaded but is not an MPI.
var errNotMPI = errors.New("not an MPI library")

// bind dlopens one library and resolves its functions and handles. The
// flavour is Open MPI when ompi_mpi_comm_world resolves, MPICH's ABI
// otherwise; which one it is, is confirmed from MPI_Get_library_version by
// the caller.
func bind(dl dlopener, path string) (*library, error) {
	h, err := dl.open(path)
	if err != nil {
		return nil, err
	}
	lib := &library{path: path}
	for _, f := range lib.functions() {
		p, err := dl.sym(h, f.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: %s is missing", errNotMPI, f.name)
		}
		*f.dst = p
	}
	if _, err := dl.sym(h, "ompi_mpi_comm_world"); err == nil {
		lib.flavour = OpenMPI
		lib.h.inPlace = 1
		for _, g := range openMPIGlobals {
			p, err := dl.sym(h, g.name)
			if err != nil || p == 0 {
				return nil, fmt.Errorf("Open MPI library without %s: %v", g.name, err)
			}
			*g.dst(&lib.h) = p
		}
	} else {
		lib.flavour = MPICH
		lib.h = mpichHandles
	}
	return lib, nil
}

// checkVersion confirms the ABI from the library's version string (MPI-3
// allows MPI_Get_library_version before MPI_Init): a library that is
// neither Open MPI nor of the MPICH family has handles this package does
// not know, and is refused instead of guessed at.
func checkVersion(f Flavour, version string) error {
	v := strings.ToLower(version)
	switch f {
	case OpenMPI:
		if strings.Contains(v, "open mpi") {
			return nil
		}
	case MPICH:
		for _, s := range []string{"mpich", "intel(r) mpi", "mvapich"} {
			if strings.Contains(v, s) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w of a known ABI: it exports no ompi_mpi_comm_world (so not Open MPI) and its version %q names no MPICH-family library", errNotMPI, strings.TrimSpace(version))
}

// call runs one MPI function and returns its int result. Pointer
// arguments are converted to uintptr in the call expression
// (uintptr(unsafe.Pointer(p))): go:uintptrescapes keeps what they point to
// alive, and on the heap, until the function returns.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}
