package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSourcesTypeCheckAsHostCpp compiles the NVRTC program as host C++
// (g++ -fsyntax-only, -Werror) with testdata/host_shim.h standing in for
// the CUDA built-ins: a syntax or type error in cu/*.cu shows here, on a
// machine without nvcc or a GPU. It skips when there is no g++.
func TestSourcesTypeCheckAsHostCpp(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ to type-check the kernels with")
	}
	shim, err := filepath.Abs("testdata/host_shim.h")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "gochat.cpp")
	if err := os.WriteFile(src, []byte("#include \""+shim+"\"\n"+programSource()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-Wno-unused-variable", src).CombinedOutput()
	if err != nil {
		t.Fatalf("g++ -fsyntax-only: %v\n%s", err, out)
	}
}
