package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// dlopener is the dynamic loader: purego's on Linux, a stub elsewhere.
type dlopener interface {
	open(path string) (uintptr, error)
	sym(lib uintptr, name string) (uintptr, error)
}

// symbol is a C function a library must (or, optional, may) export.
type symbol struct {
	name     string
	dst      *uintptr
	optional bool
}

// errMissingSymbol marks a library that loaded but lacks a function.
var errMissingSymbol = errors.New("missing function")

// bindSymbols resolves syms in the library h.
func bindSymbols(dl dlopener, h uintptr, syms []symbol) error {
	for _, s := range syms {
		p, err := dl.sym(h, s.name)
		if err != nil || p == 0 {
			if s.optional {
				*s.dst = 0
				continue
			}
			return fmt.Errorf("%w %s", errMissingSymbol, s.name)
		}
		*s.dst = p
	}
	return nil
}

// driverAPI is libcuda's functions (the _v2 entry points cuda.h maps the
// plain names to).
type driverAPI struct {
	path string

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName uintptr
	cuDeviceTotalMem, cuDeviceGetAttribute                                     uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent       uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamQuery        uintptr
	cuMemAlloc, cuMemFree, cuMemGetInfo                                        uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemsetD8Async   uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel      uintptr
	cuFuncSetAttribute, cuGetErrorName, cuGetErrorString, cuCtxSynchronize     uintptr
	cuDeviceGetPCIBusId                                                        uintptr
	cuMemHostAlloc, cuMemFreeHost                                              uintptr // pinned.go
	vmm                                                                        vmmAPI  // vmm.go
}

func (d *driverAPI) symbols() []symbol {
	return append([]symbol{
		{"cuInit", &d.cuInit, false},
		{"cuDriverGetVersion", &d.cuDriverGetVersion, false},
		{"cuDeviceGetCount", &d.cuDeviceGetCount, false},
		{"cuDeviceGet", &d.cuDeviceGet, false},
		{"cuDeviceGetName", &d.cuDeviceGetName, false},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem, false},
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute, false},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, false},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease, false},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent, false},
		{"cuCtxSynchronize", &d.cuCtxSynchronize, false},
		{"cuStreamCreate", &d.cuStreamCreate, false},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy, false},
		{"cuStreamSynchronize", &d.cuStreamSynchronize, false},
		{"cuStreamQuery", &d.cuStreamQuery, false},
		{"cuMemAlloc_v2", &d.cuMemAlloc, false},
		{"cuMemFree_v2", &d.cuMemFree, false},
		{"cuMemGetInfo_v2", &d.cuMemGetInfo, false},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync, false},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync, false},
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync, false},
		{"cuMemsetD8Async", &d.cuMemsetD8Async, false},
		{"cuModuleLoadData", &d.cuModuleLoadData, false},
		{"cuModuleUnload", &d.cuModuleUnload, false},
		{"cuModuleGetFunction", &d.cuModuleGetFunction, false},
		{"cuLaunchKernel", &d.cuLaunchKernel, false},
		{"cuFuncSetAttribute", &d.cuFuncSetAttribute, true},
		{"cuGetErrorName", &d.cuGetErrorName, true},
		{"cuGetErrorString", &d.cuGetErrorString, true},
		{"cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId, true},
		{"cuMemHostAlloc", &d.cuMemHostAlloc, true},
		{"cuMemFreeHost", &d.cuMemFreeHost, true},
	}, d.vmm.symbols()...)
}

// nvrtcAPI is libnvrtc's functions.
type nvrtcAPI struct {
	path, builtins string

	nvrtcVersion, nvrtcCreateProgram, nvrtcCompileProgram, nvrtcDestroyProgram uintptr
	nvrtcGetProgramLogSize, nvrtcGetProgramLog                                 uintptr
	nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcGetPTXSize, nvrtcGetPTX             uintptr
	nvrtcGetErrorString, nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs     uintptr
}

func (n *nvrtcAPI) symbols() []symbol {
	return []symbol{
		{"nvrtcVersion", &n.nvrtcVersion, false},
		{"nvrtcCreateProgram", &n.nvrtcCreateProgram, false},
		{"nvrtcCompileProgram", &n.nvrtcCompileProgram, false},
		{"nvrtcDestroyProgram", &n.nvrtcDestroyProgram, false},
		{"nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize, false},
		{"nvrtcGetProgramLog", &n.nvrtcGetProgramLog, false},
		{"nvrtcGetPTXSize", &n.nvrtcGetPTXSize, false},
		{"nvrtcGetPTX", &n.nvrtcGetPTX, false},
		{"nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize, true},
		{"nvrtcGetCUBIN", &n.nvrtcGetCUBIN, true},
		{"nvrtcGetErrorString", &n.nvrtcGetErrorString, true},
		{"nvrtcGetNumSupportedArchs", &n.nvrtcGetNumSupportedArchs, true},
		{"nvrtcGetSupportedArchs", &n.nvrtcGetSupportedArchs, true},
	}
}

// cublasAPI is libcublas's (and libcublasLt's) functions.
type cublasAPI struct {
	path, ltPath string

	cublasCreate, cublasDestroy, cublasSetStream, cublasGetVersion uintptr
	cublasGemmEx, cublasSetMathMode, cublasLtGetVersion            uintptr
}

func (c *cublasAPI) symbols() []symbol {
	return []symbol{
		{"cublasCreate_v2", &c.cublasCreate, false},
		{"cublasDestroy_v2", &c.cublasDestroy, false},
		{"cublasSetStream_v2", &c.cublasSetStream, false},
		{"cublasGetVersion_v2", &c.cublasGetVersion, false},
		{"cublasGemmEx", &c.cublasGemmEx, false},
		{"cublasSetMathMode", &c.cublasSetMathMode, false},
	}
}

// LoadError says which library could not be loaded and why, for each
// path tried.
type LoadError struct {
	Lib   string   // "libcuda", "libnvrtc", "libcublas"
	Tried []string // paths and sonames, in order
	Errs  []error  // why each failed
	Hint  string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: no usable %s", e.Lib)
	if len(e.Tried) == 0 {
		b.WriteString(" (nothing found to try)")
	} else {
		b.WriteString(" (")
		for i, t := range e.Tried {
			if i > 0 {
				b.WriteString("; ")
			}
			if i == 4 && len(e.Tried) > 6 {
				fmt.Fprintf(&b, "%d more", len(e.Tried)-i)
				break
			}
			if msg := fmt.Sprint(e.Errs[i]); strings.HasPrefix(msg, t+":") {
				b.WriteString(msg) // dlopen's messages start with the path
			} else {
				fmt.Fprintf(&b, "%s: %s", t, msg)
			}
		}
		b.WriteString(")")
	}
	if e.Hint != "" {
		b.WriteString(": " + e.Hint)
	}
	return b.String()
}

// Hints of the load errors.
const (
	hintDriver  = "no NVIDIA driver is installed (libcuda.so.1 comes with the driver, not the toolkit)"
	hintToolkit = "install the CUDA toolkit, or pip install nvidia-cuda-nvrtc-cu12 nvidia-cublas-cu12 (or torch), or set " + EnvLibDir + " to the folder holding it"
)

// libs is the set of loaded libraries a Device calls.
type libs struct {
	drv    driverAPI
	nvrtc  nvrtcAPI
	cublas cublasAPI

	driverVersion int // cuDriverGetVersion: 1000·major + 10·minor
}

// openDriver loads libcuda from the first candidate that dlopens and
// exports the driver API, and runs cuInit.
func openDriver(dl dlopener, cands []string) (*driverAPI, error) {
	le := &LoadError{Lib: "libcuda", Hint: hintDriver}
	for _, p := range cands {
		h, err := dl.open(p)
		if err == nil {
			d := &driverAPI{path: p}
			if err = bindSymbols(dl, h, d.symbols()); err == nil {
				return d, nil
			}
		}
		le.Tried = append(le.Tried, p)
		le.Errs = append(le.Errs, err)
	}
	return nil, le
}

// openNVRTC loads the first NVRTC whose major version the driver supports
// (maxMajor; 0: any), loading the libnvrtc-builtins of its folder first.
func openNVRTC(dl dlopener, fs globber, cands []string, maxMajor int) (*nvrtcAPI, error) {
	le := &LoadError{Lib: "libnvrtc", Hint: hintToolkit}
	for _, p := range cands {
		if m := major(p); maxMajor > 0 && m > maxMajor {
			le.Tried = append(le.Tried, p)
			le.Errs = append(le.Errs, fmt.Errorf("NVRTC %d is newer than the driver's CUDA %d", m, maxMajor))
			continue
		}
		n := &nvrtcAPI{path: p}
		if filepath.IsAbs(p) {
			// NVRTC dlopens its builtins by soname: loading them from the
			// same folder first makes that name resolve.
			for _, b := range inDir(libNVRTCBuiltins, filepath.Dir(p), fs) {
				if m := major(p); m >= 0 && major(b) != m {
					continue
				}
				if _, err := dl.open(b); err == nil {
					n.builtins = b
					break
				}
			}
		}
		h, err := dl.open(p)
		if err == nil {
			if err = bindSymbols(dl, h, n.symbols()); err == nil {
				return n, nil
			}
		}
		le.Tried = append(le.Tried, p)
		le.Errs = append(le.Errs, err)
	}
	return nil, le
}

// openCublas loads the first cuBLAS whose major version the driver
// supports, loading the cuBLASLt of its folder (of the same major) first.
func openCublas(dl dlopener, fs globber, cands []string, maxMajor int) (*cublasAPI, error) {
	le := &LoadError{Lib: "libcublas", Hint: hintToolkit}
	for _, p := range cands {
		if m := major(p); maxMajor > 0 && m > maxMajor {
			le.Tried = append(le.Tried, p)
			le.Errs = append(le.Errs, fmt.Errorf("cuBLAS %d is newer than the driver's CUDA %d", m, maxMajor))
			continue
		}
		c := &cublasAPI{path: p}
		var lt uintptr
		if filepath.IsAbs(p) {
			for _, l := range inDir(libCublasLt, filepath.Dir(p), fs) {
				if m := major(p); m >= 0 && major(l) != m {
					continue
				}
				if h, err := dl.open(l); err == nil {
					c.ltPath, lt = l, h
					break
				}
			}
		}
		h, err := dl.open(p)
		if err == nil {
			if err = bindSymbols(dl, h, c.symbols()); err == nil {
				if lt != 0 {
					c.cublasLtGetVersion, _ = dl.sym(lt, "cublasLtGetVersion")
				}
				return c, nil
			}
		}
		le.Tried = append(le.Tried, p)
		le.Errs = append(le.Errs, err)
	}
	return nil, le
}

// call runs one C function and returns its int result (CUresult,
// nvrtcResult, cublasStatus_t are C enums: the low 32 bits). Pointer
// arguments are converted to uintptr in the call expression
// (uintptr(unsafe.Pointer(p))): go:uintptrescapes keeps what they point to
// alive, and on the heap, until the function returns.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(r))
}

// callPtr runs a C function that returns a pointer or size_t.
//
//go:uintptrescapes
func callPtr(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// goString copies the NUL-terminated C string at p (nil: "").
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i)) // C memory, not Go's
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cString returns s as a NUL-terminated byte slice for C.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
