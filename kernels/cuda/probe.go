package cuda

import (
	"fmt"
	"os"
	"unsafe"
)

// loadLibs loads the driver (and runs cuInit), then NVRTC and cuBLAS of a
// major version the driver supports. The error names the library that is
// missing and every path tried.
func loadLibs(dl dlopener, env SearchEnv, fs globber) (*libs, error) {
	drv, err := openDriver(dl, candidates(libDriver, env, fs))
	if err != nil {
		return nil, err
	}
	l := &libs{drv: *drv}
	if err := cuErr("cuInit", call(drv.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("cuda: the driver %s does not start: %w", drv.path, err)
	}
	var v int32
	if err := cuErr("cuDriverGetVersion", call(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	l.driverVersion = int(v)
	maxMajor := l.driverVersion / 1000
	n, err := openNVRTC(dl, fs, candidates(libNVRTC, env, fs), maxMajor)
	if err != nil {
		return nil, err
	}
	l.nvrtc = *n
	c, err := openCublas(dl, fs, candidates(libCublas, env, fs), maxMajor)
	if err != nil {
		return nil, err
	}
	l.cublas = *c
	return l, nil
}

// Report is what `gochat env` prints about CUDA: the libraries found and
// the GPUs the driver sees. Fields of a library that did not load are
// empty and its error says why.
type Report struct {
	DriverPath    string
	DriverVersion string // the CUDA version the driver supports, e.g. "13.0"
	DriverErr     error

	NVRTCPath, NVRTCBuiltins, NVRTCVersion string
	NVRTCArchs                             []int
	NVRTCErr                               error

	CublasPath, CublasLtPath, CublasVersion string
	CublasErr                               error

	NCCLPath, NCCLVersion string
	NCCLErr               error

	GPUs   []GPUInfo
	GPUErr error

	CacheDir string // where compiled kernels are kept
}

// GPUInfo describes one GPU.
type GPUInfo struct {
	Index       int
	Name        string
	CC          string // compute capability, "9.0"
	SMs         int
	TotalMemory int64 // bytes
	FreeMemory  int64 // bytes (0: not measured)
	PCIBusID    string
}

// Probe looks for the CUDA libraries and GPUs without building anything:
// the driver and what it sees, then NVRTC and cuBLAS. It never fails;
// each part's error is in the report.
func Probe() *Report {
	return probe(sysDL{}, SearchEnvFrom(os.Getenv), osGlobber{})
}

func probe(dl dlopener, env SearchEnv, fs globber) *Report {
	r := &Report{CacheDir: DefaultCacheDir()}
	r.NCCLPath, r.NCCLVersion, r.NCCLErr = probeNCCL(dl, candidates(libNCCL, env, fs))
	drv, err := openDriver(dl, candidates(libDriver, env, fs))
	if err != nil {
		r.DriverErr = err
		return r
	}
	r.DriverPath = drv.path
	if err := cuErr("cuInit", call(drv.cuInit, 0)); err != nil {
		r.DriverErr = err
		return r
	}
	var v int32
	if err := cuErr("cuDriverGetVersion", call(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		r.DriverErr = err
		return r
	}
	r.DriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	l := &libs{drv: *drv, driverVersion: int(v)}
	r.GPUs, r.GPUErr = l.gpus()

	if n, err := openNVRTC(dl, fs, candidates(libNVRTC, env, fs), int(v)/1000); err != nil {
		r.NVRTCErr = err
	} else {
		r.NVRTCPath, r.NVRTCBuiltins = n.path, n.builtins
		r.NVRTCVersion, r.NVRTCErr = n.version()
		r.NVRTCArchs = n.supportedArchs()
	}
	if c, err := openCublas(dl, fs, candidates(libCublas, env, fs), int(v)/1000); err != nil {
		r.CublasErr = err
	} else {
		r.CublasPath, r.CublasLtPath = c.path, c.ltPath
		r.CublasVersion = cublasVersionString(c)
	}
	return r
}

// probeNCCL loads NCCL as dist/nccl would (the first candidate that
// exports ncclGetVersion) and asks its version.
func probeNCCL(dl dlopener, cands []string) (path, version string, err error) {
	le := &LoadError{Lib: "libnccl", Hint: "pip install nvidia-nccl-cu12 (torch brings it), or set " + EnvNCCLLib + " to its path"}
	for _, p := range cands {
		h, err := dl.open(p)
		if err == nil {
			var fn uintptr
			if fn, err = dl.sym(h, "ncclGetVersion"); err == nil {
				var v int32
				if call(fn, uintptr(unsafe.Pointer(&v))) == 0 {
					version = ncclVersionString(int(v))
				}
				return p, version, nil
			}
		}
		le.Tried = append(le.Tried, p)
		le.Errs = append(le.Errs, err)
	}
	return "", "", le
}

// ncclVersionString decodes ncclGetVersion's code: NCCL_VERSION(X,Y,Z) of
// nccl.h is X·1000 + Y·100 + Z up to 2.8 and X·10000 + Y·100 + Z since
// 2.9.
func ncclVersionString(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

// cublasVersionString asks cuBLASLt for its version (cuBLAS's own needs a
// handle, hence a context): major·10000 + minor·100 + patch.
func cublasVersionString(c *cublasAPI) string {
	if c.cublasLtGetVersion == 0 {
		return ""
	}
	v := int(callPtr(c.cublasLtGetVersion))
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// gpus lists the devices the driver sees, with their memory (the free
// memory needs a context: the primary one is retained and released).
func (l *libs) gpus() ([]GPUInfo, error) {
	d := &l.drv
	var count int32
	if err := cuErr("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&count)))); err != nil {
		return nil, err
	}
	var out []GPUInfo
	for i := range int(count) {
		var dev int32
		if err := cuErr("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i))); err != nil {
			return out, err
		}
		info := GPUInfo{Index: i}
		name := make([]byte, 256)
		if err := cuErr("cuDeviceGetName", call(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err == nil {
			info.Name = cStringBytes(name)
		}
		var total uintptr
		if err := cuErr("cuDeviceTotalMem_v2", call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev))); err == nil {
			info.TotalMemory = int64(total)
		}
		maj, _ := l.attr(dev, attrCCMajor)
		mnr, _ := l.attr(dev, attrCCMinor)
		info.CC = fmt.Sprintf("%d.%d", maj, mnr)
		info.SMs, _ = l.attr(dev, attrSMCount)
		if d.cuDeviceGetPCIBusId != 0 {
			bus := make([]byte, 64)
			if call(d.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&bus[0])), uintptr(len(bus)), uintptr(dev)) == 0 {
				info.PCIBusID = cStringBytes(bus)
			}
		}
		info.FreeMemory = l.freeMemory(dev)
		out = append(out, info)
	}
	return out, nil
}

// freeMemory retains the device's primary context to read its free memory
// (0 when that fails).
func (l *libs) freeMemory(dev int32) int64 {
	d := &l.drv
	g := &driverGPU{l: l, dev: dev}
	if call(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&g.ctx)), uintptr(dev)) != 0 {
		return 0
	}
	defer call(d.cuDevicePrimaryCtxRelease, uintptr(dev))
	f, _, err := g.memInfo()
	if err != nil {
		return 0
	}
	return f
}

// cStringBytes returns the bytes of b up to its first NUL.
func cStringBytes(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
