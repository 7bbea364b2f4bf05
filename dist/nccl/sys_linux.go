package nccl

import "github.com/ebitengine/purego"

// sysDL is the dynamic loader through purego (no cgo).
type sysDL struct{}

func (sysDL) open(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func (sysDL) sym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }
