package cuda

import "github.com/ebitengine/purego"

// sysDL is the dynamic loader through purego (no cgo). Libraries are
// opened RTLD_GLOBAL so that a library loaded by its full path first
// (libnvrtc-builtins beside libnvrtc, libcublasLt beside libcublas)
// satisfies the dependency the next one names by soname.
type sysDL struct{}

func (sysDL) open(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func (sysDL) sym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }
