package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// compileFlags are the NVRTC options besides the target: no FMA
// contraction, so that every kernel rounds each product and sum as written
// (AdamWStepBF16 must reproduce AdamWStep bit for bit, and dropout and the
// conversions the CPU backend's arithmetic).
var compileFlags = []string{"--fmad=false"}

// target is what NVRTC compiles for: a cubin for sm_XY when NVRTC knows
// the device's architecture, else PTX for the newest compute_XY it knows
// below it (the driver compiles that for the device when loading).
type target struct {
	arch  int  // 10·major + minor, e.g. 90
	cubin bool // false: PTX
}

func (t target) option() string {
	if t.cubin {
		return fmt.Sprintf("--gpu-architecture=sm_%d", t.arch)
	}
	return fmt.Sprintf("--gpu-architecture=compute_%d", t.arch)
}

func (t target) String() string {
	if t.cubin {
		return fmt.Sprintf("sm_%d", t.arch)
	}
	return fmt.Sprintf("compute_%d (PTX)", t.arch)
}

// chooseTarget picks the target for a device of compute capability cc
// (10·major + minor) given the architectures NVRTC supports (nil: not
// known, an NVRTC before 11.2: assume it knows cc).
func chooseTarget(cc int, supported []int) (target, error) {
	if len(supported) == 0 || slices.Contains(supported, cc) {
		return target{arch: cc, cubin: true}, nil
	}
	best := -1
	for _, a := range supported {
		if a <= cc && a > best {
			best = a
		}
	}
	if best < 0 {
		return target{}, fmt.Errorf("cuda: NVRTC supports no architecture at or below sm_%d (it supports %v)", cc, supported)
	}
	return target{arch: best, cubin: false}, nil
}

// cacheKey is the name of a compiled module in the disk cache: a hash of
// everything that determines the output.
func cacheKey(src string, t target, nvrtcVersion string, flags []string) string {
	h := sha256.New()
	for _, s := range append([]string{src, t.option(), nvrtcVersion}, flags...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	ext := ".ptx"
	if t.cubin {
		ext = ".cubin"
	}
	return hex.EncodeToString(h.Sum(nil))[:32] + ext
}

// DefaultCacheDir is where compiled kernels are kept:
// os.UserCacheDir()/gochat/nvrtc ("" when there is no user cache folder).
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "gochat", "nvrtc")
}

// cachedBuild returns the module image named key from dir, or builds it
// and stores it there (written to a temporary file and renamed, so a
// reader never sees half a file). dir "" disables the cache; a cache that
// cannot be written is not an error.
func cachedBuild(dir, key string, build func() ([]byte, error)) (img []byte, hit bool, err error) {
	if dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, key)); err == nil && len(b) > 0 {
			return b, true, nil
		}
	}
	img, err = build()
	if err != nil {
		return nil, false, err
	}
	if dir != "" {
		if os.MkdirAll(dir, 0o755) == nil {
			if f, err := os.CreateTemp(dir, key+".tmp*"); err == nil {
				_, werr := f.Write(img)
				cerr := f.Close()
				if werr == nil && cerr == nil {
					_ = os.Rename(f.Name(), filepath.Join(dir, key))
				} else {
					_ = os.Remove(f.Name())
				}
			}
		}
	}
	return img, false, nil
}

// version returns NVRTC's version, e.g. "12.4".
func (n *nvrtcAPI) version() (string, error) {
	var maj, mnr int32
	if err := nvrtcErr("nvrtcVersion", call(n.nvrtcVersion, uintptr(unsafe.Pointer(&maj)), uintptr(unsafe.Pointer(&mnr)))); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d", maj, mnr), nil
}

// supportedArchs returns the architectures NVRTC compiles for (nil when
// this NVRTC cannot say).
func (n *nvrtcAPI) supportedArchs() []int {
	if n.nvrtcGetNumSupportedArchs == 0 || n.nvrtcGetSupportedArchs == 0 {
		return nil
	}
	var num int32
	if call(n.nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&num))) != 0 || num <= 0 || num > 1024 {
		return nil
	}
	a := make([]int32, num)
	if call(n.nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&a[0]))) != 0 {
		return nil
	}
	out := make([]int, num)
	for i, v := range a {
		out[i] = int(v)
	}
	return out
}

// compile compiles src for t and returns the cubin or the NUL-terminated
// PTX. A compile error carries NVRTC's log.
func (n *nvrtcAPI) compile(src, name string, t target, flags []string) ([]byte, error) {
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := nvrtcErr("nvrtcCreateProgram", call(n.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, err
	}
	defer call(n.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))
	opts := append([]string{t.option()}, flags...)
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		copts[i] = cString(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	code := call(n.nvrtcCompileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts)
	if err := nvrtcErr("nvrtcCompileProgram", code); err != nil {
		e := err.(*Error)
		e.Detail = strings.TrimSpace(n.log(prog))
		return nil, e
	}
	sizeFn, getFn, sizeName, getName := n.nvrtcGetPTXSize, n.nvrtcGetPTX, "nvrtcGetPTXSize", "nvrtcGetPTX"
	if t.cubin {
		if n.nvrtcGetCUBINSize == 0 {
			return nil, fmt.Errorf("cuda: this NVRTC (%s) cannot produce a cubin (nvrtcGetCUBIN is missing)", n.path)
		}
		sizeFn, getFn, sizeName, getName = n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "nvrtcGetCUBINSize", "nvrtcGetCUBIN"
	}
	var size uintptr
	if err := nvrtcErr(sizeName, call(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("cuda: %s returned an empty image", sizeName)
	}
	img := make([]byte, size)
	if err := nvrtcErr(getName, call(getFn, prog, uintptr(unsafe.Pointer(&img[0])))); err != nil {
		return nil, err
	}
	return img, nil
}

// log returns a program's compile log.
func (n *nvrtcAPI) log(prog uintptr) string {
	var size uintptr
	if call(n.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size))) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if call(n.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0]))) != 0 {
		return ""
	}
	return strings.TrimRight(string(b), "\x00")
}
