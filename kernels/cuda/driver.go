package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// gpu is what a Device needs from a GPU: memory, copies, kernel launches
// and GEMMs on one stream. driverGPU implements it with the driver API,
// NVRTC and cuBLAS; the tests' fake records the calls, so every op
// wrapper's validation and launches are tested without a GPU.
type gpu interface {
	rawMemory
	// htod copies bytes from host memory into the device (done when it
	// returns: src may be reused).
	htod(dst uintptr, src unsafe.Pointer, bytes int) error
	// dtoh copies bytes from the device after the queued work (done when
	// it returns).
	dtoh(dst unsafe.Pointer, src uintptr, bytes int) error
	// dtod and memsetZero are queued on the stream.
	dtod(dst, src uintptr, bytes int) error
	memsetZero(dst uintptr, bytes int) error
	launch(k kernel, grid, block dim3, args []kernelArg) error
	gemm(g gemmCall) error
	sync() error
	// query reports whether the stream's work has finished, without
	// waiting.
	query() (done bool, err error)
	// onStream runs f with the context current on the calling OS thread
	// (locked to it for the call) and the stream's handle.
	onStream(f func(stream uintptr) error) error
	close() error
}

// dim3 is a launch's grid or block size.
type dim3 [3]uint32

// argKind is the C type of a kernel parameter.
type argKind uint8

const (
	argPtr argKind = iota + 1 // any pointer (a device address, 0 for null)
	argI32                    // int
	argF32                    // float
	argI64                    // i64 (long long)
	argU64                    // u64 (unsigned long long)
)

func (k argKind) String() string {
	return [...]string{"?", "ptr", "int", "float", "i64", "u64"}[k]
}

// kernelArg is one kernel argument: its kind and its bits; for a pointer
// to a buffer, span is the buffer's bytes (0: not known), which the tests'
// fake checks are resident.
type kernelArg struct {
	kind argKind
	bits uint64
	span uint64
}

// cudaDataType_t and cublasComputeType_t values.
const (
	cudaR32F         = 0
	cudaR16BF        = 14
	cublasCompute32F = 68
	gemmAlgoDefault  = 0xffffffff // CUBLAS_GEMM_DEFAULT (-1) as the 32-bit enum
	cublasOpN        = 0
	cublasOpT        = 1
)

// gemmCall is one cublasGemmEx, already in cuBLAS's column-major terms.
type gemmCall struct {
	transA, transB int // cublasOpN or cublasOpT
	m, n, k        int
	alpha, beta    float32
	a              uintptr
	aType, lda     int
	b              uintptr
	bType, ldb     int
	c              uintptr
	ldc            int
}

// driverGPU is a GPU through the driver API: the device's primary context
// (shared with NCCL and anything else in the process), one stream, the
// kernels' module (compiled on first use), and a cuBLAS handle on the
// stream. Every call makes the context current on the calling OS thread
// first, with the goroutine locked to it for the call.
type driverGPU struct {
	l       *libs
	ordinal int
	dev     int32 // CUdevice
	ctx     uintptr
	stream  uintptr
	blas    uintptr
	cc      int // compute capability, 10·major + minor
	tgt     target
	nvrtcV  string
	cache   string // compiled-module cache folder ("" none)
	module  uintptr
	modErr  error
	funcs   [numKernels]uintptr
	slots   [32]uint64  // kernel argument values
	ptrs    [32]uintptr // their addresses, the kernelParams array
	onBuild func(target, bool)
}

// enter locks the goroutine to its thread and makes the context current.
func (g *driverGPU) enter() error {
	runtime.LockOSThread()
	if err := cuErr("cuCtxSetCurrent", call(g.l.drv.cuCtxSetCurrent, g.ctx)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

func (g *driverGPU) leave() { runtime.UnlockOSThread() }

// openGPU retains the primary context of device ordinal, creates the
// stream and the cuBLAS handle.
func openGPU(l *libs, ordinal int, cacheDir string) (*driverGPU, error) {
	g := &driverGPU{l: l, ordinal: ordinal, cache: cacheDir}
	d := &l.drv
	var count int32
	if err := cuErr("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&count)))); err != nil {
		return nil, err
	}
	if count == 0 {
		return nil, errors.New("cuda: the driver sees no GPU")
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("cuda: no GPU %d (the driver sees %d: cuda:0 to cuda:%d)", ordinal, count, count-1)
	}
	if err := cuErr("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&g.dev)), uintptr(ordinal))); err != nil {
		return nil, err
	}
	maj, err := l.attr(g.dev, attrCCMajor)
	if err != nil {
		return nil, err
	}
	mnr, err := l.attr(g.dev, attrCCMinor)
	if err != nil {
		return nil, err
	}
	g.cc = 10*maj + mnr
	if err := cuErr("cuDevicePrimaryCtxRetain", call(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&g.ctx)), uintptr(g.dev))); err != nil {
		return nil, err
	}
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.leave()
	if err := cuErr("cuStreamCreate", call(d.cuStreamCreate, uintptr(unsafe.Pointer(&g.stream)), 0)); err != nil {
		call(d.cuDevicePrimaryCtxRelease, uintptr(g.dev))
		return nil, err
	}
	c := &l.cublas
	if err := cublasErr("cublasCreate_v2", call(c.cublasCreate, uintptr(unsafe.Pointer(&g.blas)))); err != nil {
		call(d.cuStreamDestroy, g.stream)
		call(d.cuDevicePrimaryCtxRelease, uintptr(g.dev))
		return nil, err
	}
	if err := cublasErr("cublasSetStream_v2", call(c.cublasSetStream, g.blas, g.stream)); err != nil {
		return nil, err
	}
	// CUBLAS_DEFAULT_MATH: no TF32 for fp32 GEMMs (the contract's fp32
	// matmuls are fp32); bf16 inputs use tensor cores with fp32 compute.
	if err := cublasErr("cublasSetMathMode", call(c.cublasSetMathMode, g.blas, 0)); err != nil {
		return nil, err
	}
	for i := range g.ptrs {
		g.ptrs[i] = uintptr(unsafe.Pointer(&g.slots[i]))
	}
	return g, nil
}

// Device attributes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock = 1
	attrSMCount            = 16
	attrCCMajor            = 75
	attrCCMinor            = 76
)

func (l *libs) attr(dev int32, a int) (int, error) {
	var v int32
	if err := cuErr("cuDeviceGetAttribute", call(l.drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev))); err != nil {
		return 0, err
	}
	return int(v), nil
}

func (g *driverGPU) alloc(bytes int64) (uintptr, error) {
	if err := g.enter(); err != nil {
		return 0, err
	}
	defer g.leave()
	var p uintptr
	err := cuErr("cuMemAlloc_v2", call(g.l.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes)))
	return p, err
}

func (g *driverGPU) free(p uintptr) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemFree_v2", call(g.l.drv.cuMemFree, p))
}

func (g *driverGPU) memInfo() (free, total int64, err error) {
	if err := g.enter(); err != nil {
		return 0, 0, err
	}
	defer g.leave()
	var f, t uintptr
	err = cuErr("cuMemGetInfo_v2", call(g.l.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	return int64(f), int64(t), err
}

func (g *driverGPU) htod(dst uintptr, src unsafe.Pointer, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	if err := cuErr("cuMemcpyHtoDAsync_v2", call(g.l.drv.cuMemcpyHtoDAsync, dst, uintptr(src), uintptr(bytes), g.stream)); err != nil {
		return err
	}
	// src is Go memory the caller may change once we return.
	return cuErr("cuStreamSynchronize", call(g.l.drv.cuStreamSynchronize, g.stream))
}

func (g *driverGPU) dtoh(dst unsafe.Pointer, src uintptr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	if err := cuErr("cuMemcpyDtoHAsync_v2", call(g.l.drv.cuMemcpyDtoHAsync, uintptr(dst), src, uintptr(bytes), g.stream)); err != nil {
		return err
	}
	return cuErr("cuStreamSynchronize", call(g.l.drv.cuStreamSynchronize, g.stream))
}

func (g *driverGPU) dtod(dst, src uintptr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemcpyDtoDAsync_v2", call(g.l.drv.cuMemcpyDtoDAsync, dst, src, uintptr(bytes), g.stream))
}

func (g *driverGPU) memsetZero(dst uintptr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemsetD8Async", call(g.l.drv.cuMemsetD8Async, dst, 0, uintptr(bytes), g.stream))
}

func (g *driverGPU) sync() error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuStreamSynchronize", call(g.l.drv.cuStreamSynchronize, g.stream))
}

func (g *driverGPU) query() (bool, error) {
	if err := g.enter(); err != nil {
		return false, err
	}
	defer g.leave()
	code := call(g.l.drv.cuStreamQuery, g.stream)
	if code == cudaErrorNotReady {
		return false, nil
	}
	return true, cuErr("cuStreamQuery", code)
}

func (g *driverGPU) onStream(f func(stream uintptr) error) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return f(g.stream)
}

// loadModule compiles (or takes from the disk cache) the kernels and loads
// them; called with the context current. A failure is kept: every later
// launch reports it.
func (g *driverGPU) loadModule() error {
	if g.module != 0 || g.modErr != nil {
		return g.modErr
	}
	src := programSource()
	key := cacheKey(src, g.tgt, g.nvrtcV, compileFlags)
	img, hit, err := cachedBuild(g.cache, key, func() ([]byte, error) {
		return g.l.nvrtc.compile(src, "gochat.cu", g.tgt, compileFlags)
	})
	if err == nil {
		if g.onBuild != nil {
			g.onBuild(g.tgt, hit)
		}
		err = cuErr("cuModuleLoadData", call(g.l.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&g.module)), uintptr(unsafe.Pointer(&img[0]))))
		runtime.KeepAlive(img)
		if err != nil && hit {
			// a stale or damaged cache entry: build afresh
			img, err = g.l.nvrtc.compile(src, "gochat.cu", g.tgt, compileFlags)
			if err == nil {
				err = cuErr("cuModuleLoadData", call(g.l.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&g.module)), uintptr(unsafe.Pointer(&img[0]))))
				runtime.KeepAlive(img)
			}
		}
	}
	if err != nil {
		g.modErr = fmt.Errorf("cuda: building the kernels for %v: %w", g.tgt, err)
	}
	return g.modErr
}

func (g *driverGPU) function(k kernel) (uintptr, error) {
	if f := g.funcs[k]; f != 0 {
		return f, nil
	}
	if err := g.loadModule(); err != nil {
		return 0, err
	}
	name := cString(kernelNames[k])
	var f uintptr
	if err := cuErr("cuModuleGetFunction("+kernelNames[k]+")", call(g.l.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), g.module, uintptr(unsafe.Pointer(&name[0])))); err != nil {
		return 0, err
	}
	g.funcs[k] = f
	return f, nil
}

func (g *driverGPU) launch(k kernel, grid, block dim3, args []kernelArg) error {
	if len(args) > len(g.slots) {
		return fmt.Errorf("cuda: %v: %d arguments (at most %d)", k, len(args), len(g.slots))
	}
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	f, err := g.function(k)
	if err != nil {
		return err
	}
	for i, a := range args {
		g.slots[i] = a.bits
	}
	code := call(g.l.drv.cuLaunchKernel, f,
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		0, g.stream, uintptr(unsafe.Pointer(&g.ptrs[0])), 0)
	return cuErr("cuLaunchKernel("+kernelNames[k]+")", code)
}

func (g *driverGPU) gemm(c gemmCall) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	alpha, beta := c.alpha, c.beta
	code := call(g.l.cublas.cublasGemmEx, g.blas, uintptr(c.transA), uintptr(c.transB),
		uintptr(c.m), uintptr(c.n), uintptr(c.k), uintptr(unsafe.Pointer(&alpha)),
		c.a, uintptr(c.aType), uintptr(c.lda),
		c.b, uintptr(c.bType), uintptr(c.ldb), uintptr(unsafe.Pointer(&beta)),
		c.c, cudaR32F, uintptr(c.ldc), cublasCompute32F, uintptr(gemmAlgoDefault))
	return cublasErr("cublasGemmEx", code)
}

func (g *driverGPU) close() error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(cuErr("cuStreamSynchronize", call(g.l.drv.cuStreamSynchronize, g.stream)))
	if g.blas != 0 {
		keep(cublasErr("cublasDestroy_v2", call(g.l.cublas.cublasDestroy, g.blas)))
	}
	if g.module != 0 {
		keep(cuErr("cuModuleUnload", call(g.l.drv.cuModuleUnload, g.module)))
	}
	keep(cuErr("cuStreamDestroy_v2", call(g.l.drv.cuStreamDestroy, g.stream)))
	keep(cuErr("cuDevicePrimaryCtxRelease_v2", call(g.l.drv.cuDevicePrimaryCtxRelease, uintptr(g.dev))))
	return first
}
