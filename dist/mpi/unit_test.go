package mpi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// launcherVars are every variable detectLaunch reads.
func launcherVars() []string {
	var vs []string
	for _, l := range launchers {
		vs = append(vs, l.sizeVar, l.rankVar)
	}
	return vs
}

func TestDetectLaunch(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Launch
	}{
		{"not launched", nil, Launch{Size: -1, Rank: -1, LocalSize: -1, LocalRank: -1}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
			Launch{By: "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE)", Size: 3, Rank: 2, LocalSize: 2, LocalRank: 1, OpenMPI: true}},
		{"hydra", map[string]string{"PMI_SIZE": "2", "PMI_RANK": "0", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "0"},
			Launch{By: "a PMI launcher (MPICH's mpiexec, Intel MPI, srun --mpi=pmi2) (PMI_SIZE)", Size: 2, Rank: 0, LocalSize: 2, LocalRank: 0}},
		{"mvapich", map[string]string{"MV2_COMM_WORLD_SIZE": "4", "MV2_COMM_WORLD_RANK": "3", "MV2_COMM_WORLD_LOCAL_SIZE": "2", "MV2_COMM_WORLD_LOCAL_RANK": "1"},
			Launch{By: "MVAPICH's launcher (MV2_COMM_WORLD_SIZE)", Size: 4, Rank: 3, LocalSize: 2, LocalRank: 1}},
		{"rank only", map[string]string{"PMIX_RANK": "1"},
			Launch{By: "a PMIx launcher (PMIX_RANK)", Size: -1, Rank: 1, LocalSize: -1, LocalRank: -1}},
		{"garbage size", map[string]string{"MV2_COMM_WORLD_SIZE": "two"},
			Launch{By: "MVAPICH's launcher (MV2_COMM_WORLD_SIZE)", Size: -1, Rank: -1, LocalSize: -1, LocalRank: -1}},
		{"open mpi wins", map[string]string{"PMI_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
			Launch{By: "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE)", Size: 2, Rank: -1, LocalSize: -1, LocalRank: -1, OpenMPI: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := detectLaunch(func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Errorf("detectLaunch = %+v, want %+v", got, tt.want)
			}
			if got.Launched() != (tt.env != nil) {
				t.Errorf("Launched() = %v", got.Launched())
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	if got := candidates("/x/libmpi.so", Launch{}); !slices.Equal(got, []string{"/x/libmpi.so"}) {
		t.Errorf("an override is tried alone: %v", got)
	}
	def := candidates("", Launch{})
	if def[0] != "libmpi.so.40" || !slices.Contains(def, "libmpich.so.12") ||
		slices.Index(def, "libmpich.so.12") < slices.Index(def, "/usr/local/lib/libmpi.so.40") {
		t.Errorf("Open MPI first, then MPICH: %v", def)
	}
	hydra := candidates("", Launch{By: "PMI", Size: 2})
	if hydra[0] != "libmpich.so.12" || !slices.Contains(hydra, "libmpi.so.40") {
		t.Errorf("under an MPICH launcher MPICH first: %v", hydra)
	}
	ompi := candidates("", Launch{By: "mpirun", OpenMPI: true})
	if !slices.Equal(ompi, def) {
		t.Errorf("under Open MPI's mpirun: %v", ompi)
	}
}

func TestMissingLibrary(t *testing.T) {
	const lib = "/nonexistent/libmpi.so.40"
	_, err := openLibrary(sysDL{}, []string{lib, "libmpich-nonexistent.so.12"})
	var le *LoadError
	if !errors.As(err, &le) || len(le.Tried) != 2 {
		t.Fatalf("want a *LoadError over both libraries, got %v", err)
	}
	for _, want := range []string{lib, "libmpich-nonexistent.so.12", InstallHint, EnvLib} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// New reports the same through the MPI thread.
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	if _, err := New(dev, Options{Lib: lib}); err == nil || !strings.Contains(err.Error(), lib) || !strings.Contains(err.Error(), "openmpi-bin") {
		t.Errorf("New with a missing library: %v", err)
	}
}

func TestNotMPILibrary(t *testing.T) {
	// libc loads everywhere gochat runs, and is no MPI.
	_, err := openLibrary(sysDL{}, []string{"libc.so.6"})
	if err == nil || !strings.Contains(err.Error(), "not an MPI library: MPI_Init_thread is missing") || !strings.Contains(err.Error(), "libc.so.6") {
		t.Errorf("libc as MPI: %v", err)
	}
	if _, err := New(nil, Options{ChunkBytes: 8}); err == nil {
		t.Error("a staging chunk of 8 bytes accepted")
	}
}

// fakeDL is a loader over a symbol table: address = index+1.
type fakeDL struct{ syms []string }

func (f fakeDL) open(path string) (uintptr, error) {
	if path != "libfake.so" {
		return 0, fmt.Errorf("%s: cannot open shared object file", path)
	}
	return 1, nil
}

func (f fakeDL) sym(_ uintptr, name string) (uintptr, error) {
	if i := slices.Index(f.syms, name); i >= 0 {
		return uintptr(0x1000 + i), nil
	}
	return 0, fmt.Errorf("undefined symbol: %s", name)
}

func TestFlavour(t *testing.T) {
	var fns []string
	for _, f := range (&library{}).functions() {
		fns = append(fns, f.name)
	}
	mpich, err := openLibrary(fakeDL{fns}, []string{"libfake.so"})
	if err != nil {
		t.Fatal(err)
	}
	if mpich.flavour != MPICH || mpich.h != mpichHandles || mpich.allreduce == 0 {
		t.Errorf("no ompi_mpi_comm_world: want MPICH's handles, got %v %+v", mpich.flavour, mpich.h)
	}
	var globals []string
	for _, g := range openMPIGlobals {
		globals = append(globals, g.name)
	}
	ompi, err := openLibrary(fakeDL{append(slices.Clone(fns), globals...)}, []string{"libfake.so"})
	if err != nil {
		t.Fatal(err)
	}
	if ompi.flavour != OpenMPI || ompi.h.inPlace != 1 || ompi.h.commWorld != uintptr(0x1000+len(fns)) || ompi.h.errorsReturn != uintptr(0x1000+len(fns)+len(globals)-1) {
		t.Errorf("Open MPI's handles are its globals' addresses: %+v", ompi.h)
	}
	// An Open MPI lacking one of the globals is refused, not half bound.
	if _, err := openLibrary(fakeDL{append(slices.Clone(fns), globals[:2]...)}, []string{"libfake.so"}); err == nil || !strings.Contains(err.Error(), globals[2]) {
		t.Errorf("Open MPI without %s: %v", globals[2], err)
	}
	if _, err := openLibrary(fakeDL{fns[1:]}, []string{"libfake.so"}); err == nil || !strings.Contains(err.Error(), fns[0]) {
		t.Errorf("a library without %s: %v", fns[0], err)
	}
}

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		f       Flavour
		version string
		ok      bool
	}{
		{OpenMPI, "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022", true},
		{MPICH, "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022", true},
		{MPICH, "Intel(R) MPI Library 2021.10 for Linux* OS", true},
		{MPICH, "MVAPICH2 Version :\t2.3.7", true},
		{MPICH, "Open MPI v5.0.0", false}, // Open MPI's version without its globals: unknown ABI
		{MPICH, "", false},
		{OpenMPI, "MPICH Version: 4", false},
	}
	for _, tt := range tests {
		if err := checkVersion(tt.f, tt.version); (err == nil) != tt.ok {
			t.Errorf("checkVersion(%v, %q) = %v, want ok=%v", tt.f, tt.version, err, tt.ok)
		}
	}
}

func TestChunks(t *testing.T) {
	tests := []struct {
		n, per int
		want   [][2]int
	}{
		{0, 4, nil},
		{3, 4, [][2]int{{0, 3}}},
		{4, 4, [][2]int{{0, 4}}},
		{9, 4, [][2]int{{0, 4}, {4, 4}, {8, 1}}},
		{12, 4, [][2]int{{0, 4}, {4, 4}, {8, 4}}},
	}
	for _, tt := range tests {
		var got [][2]int
		_ = chunks(tt.n, tt.per, func(off, k int) error { got = append(got, [2]int{off, k}); return nil })
		if !slices.Equal(got, tt.want) {
			t.Errorf("chunks(%d, %d) = %v, want %v", tt.n, tt.per, got, tt.want)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := chunks(10, 2, func(int, int) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("chunks stops at the first error: %v after %d calls", err, calls)
	}
	// 64 MiB of staging: 16 Mi fp32 for an all-reduce; for a reduce-scatter
	// or all-gather on 3 ranks, 4 runs of 4 Mi.
	if got := perChunk(DefaultChunkBytes/4, 1); got != 16<<20 {
		t.Errorf("all-reduce chunk = %d elements", got)
	}
	if got := perChunk(DefaultChunkBytes/4, 3+1); got != 4<<20 {
		t.Errorf("3-rank all-gather chunk = %d elements", got)
	}
	if got := perChunk(16, 17); got != 0 {
		t.Errorf("a chunk too small for the ranks is %d, want 0", got)
	}
}

// deviceBuffer is a Buffer that is not host memory.
type deviceBuffer struct{ n int }

func (deviceBuffer) DType() kernels.DType              { return kernels.F32 }
func (b deviceBuffer) Len() int                        { return b.n }
func (b deviceBuffer) Slice(off, n int) kernels.Buffer { return deviceBuffer{n} }

// wideBuffer is a Go slice whose elements do not match its DType.
type wideBuffer []float64

func (wideBuffer) DType() kernels.DType              { return kernels.F32 }
func (b wideBuffer) Len() int                        { return len(b) }
func (b wideBuffer) Slice(off, n int) kernels.Buffer { return b[off : off+n] }

func TestHostPointer(t *testing.T) {
	f := cpu.F32(make([]float32, 4))
	if p, ok := hostPointer(f); !ok || p != unsafe.Pointer(&f[0]) {
		t.Errorf("cpu.F32 is host memory: %v %v", p, ok)
	}
	h := cpu.BF16(make([]uint16, 4))
	if _, ok := hostPointer(h.Slice(1, 2)); !ok {
		t.Error("a view of cpu.BF16 is host memory")
	}
	if _, ok := hostPointer(cpu.I32(make([]int32, 3))); !ok {
		t.Error("cpu.I32 is host memory")
	}
	for _, b := range []kernels.Buffer{deviceBuffer{4}, wideBuffer(make([]float64, 4)), cpu.F32(nil)} {
		if _, ok := hostPointer(b); ok {
			t.Errorf("%T of %d elements taken for host memory MPI can use in place", b, b.Len())
		}
	}
}

func TestFromEnvSingle(t *testing.T) {
	for _, v := range launcherVars() {
		t.Setenv(v, "")
	}
	t.Setenv(EnvLib, "/nonexistent/libmpi.so") // not loaded outside a launcher
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	c, err := FromEnv(dev)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(dist.Single); !ok || c.Size() != 1 {
		t.Errorf("outside a launcher FromEnv = %T of %d ranks, want dist.Single", c, c.Size())
	}
	// Launched with a library that is not there: the error says what to install.
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	if _, err := FromEnv(dev); err == nil || !strings.Contains(err.Error(), "/nonexistent/libmpi.so") || !strings.Contains(err.Error(), InstallHint) {
		t.Errorf("launched without MPI: %v", err)
	}
}

func TestCheckDType(t *testing.T) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.I32} {
		if err := checkDType("x", dt); err != nil {
			t.Error(err)
		}
	}
	if err := checkDType("all-reduce", kernels.F16); err == nil || !strings.Contains(err.Error(), "f16") {
		t.Errorf("F16: %v", err)
	}
}
