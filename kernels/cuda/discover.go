package cuda

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Library discovery: where the CUDA libraries are looked for, in order.
// It is a pure function of the environment variables below and of a
// filesystem that answers globs, so that it is tested without a GPU.
//
// The driver (libcuda.so.1) belongs to the NVIDIA driver, not to a
// toolkit: it is found by its soname through the dynamic loader
// (ld.so.cache, LD_LIBRARY_PATH), then in the folders drivers and
// containers install it to. The toolkit's libraries (NVRTC, cuBLAS,
// cuBLASLt) come from, in order: GOCHAT_CUDA_LIB_DIR (alone when set: a
// wrong override is an error, not a silent fallback), LD_LIBRARY_PATH,
// CUDA_HOME, CUDA_PATH, /usr/local/cuda*, the pip wheels of Python
// environments (site-packages/nvidia/*/lib, which holds nvidia-cublas-cu12,
// nvidia-cuda-nvrtc-cu12 and the CUDA 13 wheels' nvidia/cu13/lib, and
// torch/lib), then the system's library folders. A stub libcuda (the
// toolkit's lib64/stubs, which only fails) is never picked. NCCL is looked
// for where the toolkit is (the pip wheel nvidia-nccl-cu12 puts it in
// site-packages/nvidia/nccl/lib), unless GOCHAT_NCCL_LIB names it.

// Environment variables read by discovery.
const (
	// EnvLibDir overrides the search of the toolkit libraries: a list of
	// folders (separated by ':') searched alone.
	EnvLibDir = "GOCHAT_CUDA_LIB_DIR"
	// EnvNCCLLib overrides the search of NCCL: a path (or soname) tried
	// alone.
	EnvNCCLLib = "GOCHAT_NCCL_LIB"
)

// SearchEnv is the part of the environment discovery reads.
type SearchEnv struct {
	LibDir        string // GOCHAT_CUDA_LIB_DIR
	NCCLLib       string // GOCHAT_NCCL_LIB
	CUDAHome      string // CUDA_HOME
	CUDAPath      string // CUDA_PATH
	LDLibraryPath string // LD_LIBRARY_PATH
	VirtualEnv    string // VIRTUAL_ENV
	CondaPrefix   string // CONDA_PREFIX
	PythonPath    string // PYTHONPATH
	Home          string // HOME
}

// SearchEnvFrom reads a SearchEnv through getenv (os.Getenv).
func SearchEnvFrom(getenv func(string) string) SearchEnv {
	return SearchEnv{
		LibDir:        getenv(EnvLibDir),
		NCCLLib:       getenv(EnvNCCLLib),
		CUDAHome:      getenv("CUDA_HOME"),
		CUDAPath:      getenv("CUDA_PATH"),
		LDLibraryPath: getenv("LD_LIBRARY_PATH"),
		VirtualEnv:    getenv("VIRTUAL_ENV"),
		CondaPrefix:   getenv("CONDA_PREFIX"),
		PythonPath:    getenv("PYTHONPATH"),
		Home:          getenv("HOME"),
	}
}

// globber answers filepath.Glob patterns with the matching paths, sorted.
type globber interface {
	Glob(pattern string) []string
}

// osGlobber is the real filesystem.
type osGlobber struct{}

func (osGlobber) Glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// libKind names one of the libraries gochat loads.
type libKind int

const (
	libDriver libKind = iota
	libNVRTCBuiltins
	libNVRTC
	libCublasLt
	libCublas
	libNCCL
	numLibs
)

func (k libKind) String() string {
	return [...]string{"libcuda", "libnvrtc-builtins", "libnvrtc", "libcublasLt", "libcublas", "libnccl"}[k]
}

// base is the library's file name without a version.
func (k libKind) base() string { return k.String() + ".so" }

// bareSonames are the sonames tried through the dynamic loader's own search
// after every folder: the driver's is its ABI (so.1), the toolkit's are
// tried from the newest major down.
func (k libKind) bareSonames() []string {
	switch k {
	case libDriver:
		return []string{"libcuda.so.1"}
	case libNCCL:
		return []string{"libnccl.so.2"}
	}
	var s []string
	for _, v := range []string{"13", "12", "11"} {
		s = append(s, k.base()+"."+v)
	}
	return s
}

// driverDirs are the folders drivers (and the NVIDIA container toolkit)
// install libcuda.so.1 to.
var driverDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu",
	"/usr/lib/wsl/lib", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib",
}

// systemDirs are the system library folders searched last for the toolkit.
var systemDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/usr/lib"}

// sitePackages returns the Python package folders of env, in order: the
// active virtual environment, conda, PYTHONPATH, the user's, then the
// system's and /opt installs (each python3.* version, newest first).
func sitePackages(env SearchEnv, fs globber) []string {
	var pats []string
	if env.VirtualEnv != "" {
		pats = append(pats, filepath.Join(env.VirtualEnv, "lib/python3*/site-packages"))
	}
	if env.CondaPrefix != "" {
		pats = append(pats, filepath.Join(env.CondaPrefix, "lib/python3*/site-packages"))
	}
	var out []string
	for _, p := range splitList(env.PythonPath) {
		out = append(out, p)
	}
	if env.Home != "" {
		pats = append(pats, filepath.Join(env.Home, ".local/lib/python3*/site-packages"))
	}
	pats = append(pats,
		"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages", "/usr/lib64/python3*/site-packages",
		"/opt/conda/lib/python3*/site-packages", "/opt/*/lib/python3*/site-packages",
	)
	for _, p := range pats {
		m := fs.Glob(p)
		sortDirsDesc(m)
		out = append(out, m...)
	}
	return out
}

// toolkitDirs returns the folders searched for NVRTC and cuBLAS, in order,
// without duplicates.
func toolkitDirs(env SearchEnv, fs globber) []string {
	if env.LibDir != "" {
		return dedup(splitList(env.LibDir))
	}
	var dirs []string
	dirs = append(dirs, splitList(env.LDLibraryPath)...)
	for _, h := range []string{env.CUDAHome, env.CUDAPath} {
		if h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"), filepath.Join(h, "targets/x86_64-linux/lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64")
	cu := fs.Glob("/usr/local/cuda-*/lib64")
	sortDirsDesc(cu)
	dirs = append(dirs, cu...)
	dirs = append(dirs, "/opt/cuda/lib64")
	for _, sp := range sitePackages(env, fs) {
		libs := fs.Glob(filepath.Join(sp, "nvidia/*/lib"))
		sortDirsDesc(libs) // nvidia/cu13/lib before nvidia/cublas/lib
		dirs = append(dirs, libs...)
		dirs = append(dirs, filepath.Join(sp, "torch/lib"))
	}
	dirs = append(dirs, systemDirs...)
	return dedup(dirs)
}

// candidates returns the paths to try, in order, for library k: every
// versioned file of it in each folder (newest version first within a
// folder), then the bare sonames for the dynamic loader's own search.
// The driver is looked for by soname first and never in a stubs folder.
func candidates(k libKind, env SearchEnv, fs globber) []string {
	if k == libNCCL && env.NCCLLib != "" {
		return []string{env.NCCLLib}
	}
	var out []string
	if k == libDriver {
		out = append(out, k.bareSonames()...)
		dirs := append(splitList(env.LDLibraryPath), driverDirs...)
		for _, d := range dedup(dirs) {
			for _, p := range fs.Glob(filepath.Join(d, "libcuda.so.1*")) {
				if !isStub(p) {
					out = append(out, p)
				}
			}
		}
		return dedup(out)
	}
	for _, d := range toolkitDirs(env, fs) {
		m := fs.Glob(filepath.Join(d, k.base()+"*"))
		var keep []string
		for _, p := range m {
			if !isStub(p) && strings.HasPrefix(filepath.Base(p), k.base()) {
				keep = append(keep, p)
			}
		}
		sortByVersionDesc(keep)
		out = append(out, keep...)
	}
	if env.LibDir == "" {
		out = append(out, k.bareSonames()...)
	}
	return dedup(out)
}

// NCCLCandidates returns the NCCL libraries to try, in order, for env
// (SearchEnvFrom(os.Getenv)): GOCHAT_NCCL_LIB alone when set, else every
// libnccl.so* in the toolkit folders (the pip wheels' nvidia/nccl/lib
// among them), then libnccl.so.2 through the dynamic loader. dist/nccl
// loads the first that works; gochat env reports the same one.
func NCCLCandidates(env SearchEnv) []string { return candidates(libNCCL, env, osGlobber{}) }

// inDir returns the candidates of k in the folder dir only (the builtins
// of a chosen NVRTC, the cuBLASLt beside a cuBLAS), newest first.
func inDir(k libKind, dir string, fs globber) []string {
	m := fs.Glob(filepath.Join(dir, k.base()+"*"))
	sortByVersionDesc(m)
	return m
}

func isStub(p string) bool { return strings.Contains(p, "/stubs/") }

// sonameVersion returns the version numbers after ".so." in a library's
// file name (libnvrtc.so.12.4.127 -> [12 4 127]; libnvrtc.so -> nil).
func sonameVersion(p string) []int {
	b := filepath.Base(p)
	i := strings.Index(b, ".so.")
	if i < 0 {
		return nil
	}
	return versionDigits(b[i+4:])
}

// dirVersion returns the version in the name of a folder's parent, the
// component a search pattern's wildcard matched: cuda-12.4/lib64 ->
// [12 4], python3.11/site-packages -> [3 11], nvidia/cu13/lib -> [13],
// nvidia/cublas/lib -> nil.
func dirVersion(p string) []int {
	b := filepath.Base(filepath.Dir(p))
	i := strings.IndexAny(b, "0123456789")
	if i < 0 {
		return nil
	}
	return versionDigits(b[i:])
}

// versionDigits parses "12.4.127..." into [12 4 127], stopping at the
// first field that is not a number.
func versionDigits(s string) []int {
	var v []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		v = append(v, n)
	}
	return v
}

// major is the first version number of a library path, -1 for none.
func major(p string) int {
	if v := sonameVersion(p); len(v) > 0 {
		return v[0]
	}
	return -1
}

// sortByVersionDesc orders library paths by their soname version, newest
// first; paths without one go last, in name order.
func sortByVersionDesc(ps []string) { sortDesc(ps, sonameVersion) }

// sortDirsDesc orders folders by dirVersion, newest first.
func sortDirsDesc(ps []string) { sortDesc(ps, dirVersion) }

func sortDesc(ps []string, version func(string) []int) {
	slices.SortStableFunc(ps, func(a, b string) int {
		if c := slices.Compare(version(b), version(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func dedup(xs []string) []string {
	seen := make(map[string]bool, len(xs))
	out := xs[:0:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
