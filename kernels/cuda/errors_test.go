package cuda

import (
	"errors"
	"testing"
)

func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
		oom  bool
	}{
		{cuErr("cuMemAlloc_v2", 2), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)", true},
		{cuErr("cuInit", 100), "cuda: cuInit: CUDA_ERROR_NO_DEVICE (100)", false},
		{cuErr("cuInit", 34), "cuda: cuInit: CUDA_ERROR_STUB_LIBRARY (34)", false},
		{cuErr("cuLaunchKernel(k_add)", 700), "cuda: cuLaunchKernel(k_add): CUDA_ERROR_ILLEGAL_ADDRESS (700)", false},
		{cuErr("cuModuleLoadData", 209), "cuda: cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU (209)", false},
		{cuErr("cuX", 4242), "cuda: cuX: CUDA_ERROR_4242 (4242)", false},
		{nvrtcErr("nvrtcCompileProgram", 6), "cuda: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)", false},
		{nvrtcErr("nvrtcCreateProgram", 1), "cuda: nvrtcCreateProgram: NVRTC_ERROR_OUT_OF_MEMORY (1)", true},
		{nvrtcErr("nvrtcVersion", 99), "cuda: nvrtcVersion: NVRTC_ERROR_99 (99)", false},
		{cublasErr("cublasGemmEx", 7), "cuda: cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE (7)", false},
		{cublasErr("cublasCreate_v2", 3), "cuda: cublasCreate_v2: CUBLAS_STATUS_ALLOC_FAILED (3)", true},
		{cublasErr("cublasGemmEx", 15), "cuda: cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED (15)", false},
		{cublasErr("cublasGemmEx", 2), "cuda: cublasGemmEx: CUBLAS_STATUS_2 (2)", false},
	} {
		if c.err == nil {
			t.Fatalf("%q: nil error", c.want)
		}
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
		if got := errors.Is(c.err, ErrOutOfMemory); got != c.oom {
			t.Errorf("%q: errors.Is(ErrOutOfMemory) = %v, want %v", c.want, got, c.oom)
		}
	}
	for _, err := range []error{cuErr("cuInit", 0), nvrtcErr("nvrtcVersion", 0), cublasErr("cublasGemmEx", 0)} {
		if err != nil {
			t.Errorf("success mapped to %v", err)
		}
	}
	e := &Error{Lib: "nvrtc", Call: "nvrtcCompileProgram", Code: 6, Name: "NVRTC_ERROR_COMPILATION", Detail: "gochat.cu(3): error: x"}
	if got, want := e.Error(), "cuda: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6): gochat.cu(3): error: x"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The name tables hold each library's names under the right prefix.
func TestErrorNameTables(t *testing.T) {
	for _, tb := range []struct {
		m      map[int]string
		prefix string
	}{{cuResultNames, "CUDA_"}, {nvrtcResultNames, "NVRTC_"}, {cublasStatusNames, "CUBLAS_STATUS_"}} {
		seen := map[string]bool{}
		for code, name := range tb.m {
			if len(name) <= len(tb.prefix) || name[:len(tb.prefix)] != tb.prefix {
				t.Errorf("%d: %q lacks the prefix %s", code, name, tb.prefix)
			}
			if seen[name] {
				t.Errorf("%q twice", name)
			}
			seen[name] = true
		}
	}
}
