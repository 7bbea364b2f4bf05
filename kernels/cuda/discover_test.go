package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeFS is a set of paths (files and folders) answering globs.
type fakeFS map[string]bool

func newFakeFS(paths ...string) fakeFS {
	fs := fakeFS{}
	for _, p := range paths {
		for d := p; d != "/" && d != "."; d = filepath.Dir(d) {
			fs[d] = true
		}
	}
	return fs
}

func (f fakeFS) Glob(pattern string) []string {
	var out []string
	for p := range f {
		if ok, _ := filepath.Match(pattern, p); ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// A machine like the GPU machine: the driver in the system folder, torch
// from pip with the CUDA 12 wheels, a toolkit stub that must not be used.
var pipCU12 = []string{
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
	"/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15",
	"/usr/local/cuda/lib64/stubs/libcuda.so",
	"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.4",
	"/usr/local/lib/python3.10/dist-packages/nvidia/cublas/lib/libcublas.so.12",
	"/usr/local/lib/python3.10/dist-packages/nvidia/cublas/lib/libcublasLt.so.12",
	"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_runtime/lib/libcudart.so.12",
	"/usr/local/lib/python3.10/dist-packages/torch/lib/libtorch.so",
}

func TestCandidatesPipWheels(t *testing.T) {
	fs := newFakeFS(pipCU12...)
	env := SearchEnv{Home: "/root"}
	sp := "/usr/local/lib/python3.10/dist-packages/nvidia/"
	for _, c := range []struct {
		k     libKind
		first string
	}{
		{libDriver, "libcuda.so.1"},
		{libNVRTC, sp + "cuda_nvrtc/lib/libnvrtc.so.12"},
		{libCublas, sp + "cublas/lib/libcublas.so.12"},
		{libCublasLt, sp + "cublas/lib/libcublasLt.so.12"},
		{libNVRTCBuiltins, sp + "cuda_nvrtc/lib/libnvrtc-builtins.so.12.4"},
	} {
		got := candidates(c.k, env, fs)
		if len(got) == 0 || got[0] != c.first {
			t.Errorf("%v: candidates %v, want %s first", c.k, got, c.first)
		}
		for _, p := range got {
			if strings.Contains(p, "/stubs/") {
				t.Errorf("%v: the stub %s is a candidate", c.k, p)
			}
		}
	}
	// The driver: its soname, then the system file, never libcuda.so.570...
	// alone before the soname.
	drv := candidates(libDriver, env, fs)
	if !slices.Contains(drv, "/usr/lib/x86_64-linux-gnu/libcuda.so.1") {
		t.Errorf("driver candidates %v lack the system libcuda.so.1", drv)
	}
	// cuBLAS never picks cuBLASLt (libcublas.so* does not match libcublasLt).
	for _, p := range candidates(libCublas, env, fs) {
		if strings.Contains(p, "Lt") {
			t.Errorf("cublas candidate %s", p)
		}
	}
	// bare sonames come last, newest major first
	nv := candidates(libNVRTC, env, fs)
	if tail := nv[len(nv)-3:]; !slices.Equal(tail, []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11"}) {
		t.Errorf("nvrtc candidates end with %v", tail)
	}
}

func TestCandidatesCUDA13Wheels(t *testing.T) {
	// CUDA 13's wheels put every library in nvidia/cu13/lib; a virtualenv
	// comes before the system's site-packages; cu13 before older wheels.
	fs := newFakeFS(
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc-builtins.so.13.0",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	)
	got := candidates(libNVRTC, SearchEnv{VirtualEnv: "/venv"}, fs)
	want := []string{
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	}
	if !slices.Equal(got[:3], want) {
		t.Errorf("got %v\nwant %v first", got, want)
	}
}

func TestCandidatesOrderAndOverride(t *testing.T) {
	fs := newFakeFS(
		"/opt/ld/libnvrtc.so.12",
		"/cuda-home/lib64/libnvrtc.so",
		"/cuda-home/lib64/libnvrtc.so.12",
		"/cuda-home/lib64/libnvrtc.so.12.4.127",
		"/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2",
		"/usr/local/cuda-12.6/lib64/libnvrtc.so.12",
		"/usr/local/cuda/lib64/libnvrtc.so.12",
		"/mine/libnvrtc.so.12",
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2",
	)
	env := SearchEnv{LDLibraryPath: "/opt/ld::", CUDAHome: "/cuda-home", Home: "/home/u"}
	got := candidates(libNVRTC, env, fs)
	want := []string{
		"/opt/ld/libnvrtc.so.12",
		"/cuda-home/lib64/libnvrtc.so.12.4.127", "/cuda-home/lib64/libnvrtc.so.12", "/cuda-home/lib64/libnvrtc.so",
		"/usr/local/cuda/lib64/libnvrtc.so.12",
		"/usr/local/cuda-12.6/lib64/libnvrtc.so.12",
		"/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2",
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2",
		"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// GOCHAT_CUDA_LIB_DIR alone, no loader fallback.
	env.LibDir = "/mine:/nothing"
	if got := candidates(libNVRTC, env, fs); !slices.Equal(got, []string{"/mine/libnvrtc.so.12"}) {
		t.Errorf("with the override: %v", got)
	}
	if got := candidates(libCublas, env, fs); len(got) != 0 {
		t.Errorf("with an override without cuBLAS: %v, want nothing", got)
	}
}

func TestVersions(t *testing.T) {
	for _, c := range []struct {
		p    string
		want []int
	}{
		{"/a/libnvrtc.so.12.4.127", []int{12, 4, 127}},
		{"libcublas.so.13", []int{13}},
		{"/a/libnvrtc.so", nil},
		{"/a/libnvrtc-builtins.so.12.4", []int{12, 4}},
	} {
		if got := sonameVersion(c.p); !slices.Equal(got, c.want) {
			t.Errorf("sonameVersion(%q) = %v, want %v", c.p, got, c.want)
		}
	}
	for _, c := range []struct {
		p    string
		want []int
	}{
		{"/usr/local/cuda-12.4/lib64", []int{12, 4}},
		{"/x/lib/python3.11/site-packages", []int{3, 11}},
		{"/x/nvidia/cu13/lib", []int{13}},
		{"/x/nvidia/cublas/lib", nil},
	} {
		if got := dirVersion(c.p); !slices.Equal(got, c.want) {
			t.Errorf("dirVersion(%q) = %v, want %v", c.p, got, c.want)
		}
	}
	if major("libnvrtc.so.13") != 13 || major("libnvrtc.so") != -1 {
		t.Error("major")
	}
}

// fakeDL opens the paths in its set (recording the order) and resolves
// every symbol but those in missing.
type fakeDL struct {
	ok      map[string]bool
	missing map[string]bool
	opened  []string
}

func (f *fakeDL) open(p string) (uintptr, error) {
	if !f.ok[p] {
		return 0, fmt.Errorf("%s: cannot open shared object file", p)
	}
	f.opened = append(f.opened, p)
	return uintptr(len(f.opened)), nil
}

func (f *fakeDL) sym(_ uintptr, name string) (uintptr, error) {
	if f.missing[name] {
		return 0, errors.New("undefined symbol " + name)
	}
	return 0x1000, nil
}

func TestOpenNVRTCBuiltinsFirstAndDriverVersion(t *testing.T) {
	fs := newFakeFS(
		"/w/nvidia/cu13/lib/libnvrtc.so.13", "/w/nvidia/cu13/lib/libnvrtc-builtins.so.13.0",
		"/w/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", "/w/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.4",
		"/w/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.11.8",
	)
	all := map[string]bool{}
	for p := range fs {
		all[p] = true
	}
	cands := []string{"/w/nvidia/cu13/lib/libnvrtc.so.13", "/w/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"}

	// A CUDA 13 driver takes NVRTC 13, its builtins opened first.
	dl := &fakeDL{ok: all}
	n, err := openNVRTC(dl, fs, cands, 13)
	if err != nil || n.path != cands[0] || n.builtins != "/w/nvidia/cu13/lib/libnvrtc-builtins.so.13.0" {
		t.Fatalf("driver 13: %+v, %v", n, err)
	}
	if !slices.Equal(dl.opened, []string{"/w/nvidia/cu13/lib/libnvrtc-builtins.so.13.0", cands[0]}) {
		t.Fatalf("opened %v", dl.opened)
	}
	// A CUDA 12 driver skips NVRTC 13 and takes 12 with the 12 builtins.
	dl = &fakeDL{ok: all}
	n, err = openNVRTC(dl, fs, cands, 12)
	if err != nil || n.path != cands[1] || n.builtins != "/w/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.4" {
		t.Fatalf("driver 12: %+v, %v", n, err)
	}
	// A CUDA 11 driver: nothing fits; the error says why for each.
	_, err = openNVRTC(&fakeDL{ok: all}, fs, cands, 11)
	var le *LoadError
	if !errors.As(err, &le) || len(le.Tried) != 2 || !strings.Contains(err.Error(), "newer than the driver's CUDA 11") || !strings.Contains(err.Error(), EnvLibDir) {
		t.Fatalf("driver 11: %v", err)
	}
	// A library without the functions is skipped.
	dl = &fakeDL{ok: all, missing: map[string]bool{"nvrtcCompileProgram": true}}
	_, err = openNVRTC(dl, fs, cands, 13)
	if err == nil || !strings.Contains(err.Error(), "missing function nvrtcCompileProgram") {
		t.Fatalf("missing symbol: %v", err)
	}
	// Optional functions may be missing.
	dl = &fakeDL{ok: all, missing: map[string]bool{"nvrtcGetSupportedArchs": true}}
	if n, err := openNVRTC(dl, fs, cands, 13); err != nil || n.nvrtcGetSupportedArchs != 0 {
		t.Fatalf("optional symbol: %+v %v", n, err)
	}
}

func TestOpenCublasLtBeside(t *testing.T) {
	fs := newFakeFS("/w/cublas/lib/libcublas.so.12", "/w/cublas/lib/libcublasLt.so.12", "/w/cublas/lib/libcublasLt.so.11")
	all := map[string]bool{}
	for p := range fs {
		all[p] = true
	}
	dl := &fakeDL{ok: all}
	c, err := openCublas(dl, fs, []string{"/w/cublas/lib/libcublas.so.12"}, 13)
	if err != nil || c.ltPath != "/w/cublas/lib/libcublasLt.so.12" {
		t.Fatalf("%+v %v", c, err)
	}
	if dl.opened[0] != c.ltPath {
		t.Fatalf("cuBLASLt not opened first: %v", dl.opened)
	}
}

func TestOpenDriverErrorNamesWhatIsMissing(t *testing.T) {
	_, err := openDriver(&fakeDL{}, candidates(libDriver, SearchEnv{}, newFakeFS()))
	if err == nil || !strings.Contains(err.Error(), "no usable libcuda") || !strings.Contains(err.Error(), "libcuda.so.1: ") || !strings.Contains(err.Error(), hintDriver) {
		t.Fatalf("got %v", err)
	}
}

func TestNCCLCandidates(t *testing.T) {
	// The pip wheel nvidia-nccl-cu12 (torch's dependency) beside CUDA_HOME's
	// copy: the toolkit folders come first, then the wheels, then the
	// loader's own search.
	fs := newFakeFS(
		"/cuda/lib64/libnccl.so.2.18.1",
		"/cuda/lib64/libnccl.so.2",
		"/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		"/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl-net.so",
	)
	got := candidates(libNCCL, SearchEnv{CUDAHome: "/cuda"}, fs)
	want := []string{
		"/cuda/lib64/libnccl.so.2.18.1", "/cuda/lib64/libnccl.so.2",
		"/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		"libnccl.so.2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// GOCHAT_NCCL_LIB alone.
	if got := candidates(libNCCL, SearchEnv{CUDAHome: "/cuda", NCCLLib: "/my/libnccl.so.2"}, fs); !slices.Equal(got, []string{"/my/libnccl.so.2"}) {
		t.Errorf("with the override: %v", got)
	}
	if env := SearchEnvFrom(envMap{EnvNCCLLib: "/x.so"}.get); env.NCCLLib != "/x.so" {
		t.Errorf("SearchEnvFrom: %+v", env)
	}
	// probeNCCL says why nothing loaded (a library that loads is called,
	// which needs the real one).
	_, _, err := probeNCCL(&fakeDL{}, []string{"/my/libnccl.so.2"})
	if err == nil || !strings.Contains(err.Error(), "/my/libnccl.so.2: cannot open") || !strings.Contains(err.Error(), EnvNCCLLib) {
		t.Errorf("probe of nothing: %v", err)
	}
}

type envMap map[string]string

func (m envMap) get(k string) string { return m[k] }

func TestNCCLVersionString(t *testing.T) {
	for code, want := range map[int]string{2804: "2.8.4", 21805: "2.18.5", 22703: "2.27.3", 30001: "3.0.1"} {
		if got := ncclVersionString(code); got != want {
			t.Errorf("ncclVersionString(%d) = %s, want %s", code, got, want)
		}
	}
}
