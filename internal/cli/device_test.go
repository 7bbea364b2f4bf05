package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

func TestParseDevice(t *testing.T) {
	for _, c := range []struct {
		in      string
		kind    string
		ordinal int
		err     bool
	}{
		{"", "auto", 0, false}, {"auto", "auto", 0, false}, {"cpu", "cpu", 0, false},
		{"cuda", "cuda", 0, false}, {"gpu", "cuda", 0, false}, {"cuda:3", "cuda", 3, false},
		{"cuda:-1", "", 0, true}, {"cuda:", "", 0, true}, {"cuda:x", "", 0, true}, {"tpu", "", 0, true}, {"CPU", "", 0, true},
	} {
		got, err := parseDevice(c.in)
		if (err != nil) != c.err || err == nil && (got.Kind != c.kind || got.Ordinal != c.ordinal) {
			t.Errorf("parseDevice(%q) = %+v, %v", c.in, got, err)
		}
		var ue usageError
		if err != nil && !errors.As(err, &ue) {
			t.Errorf("parseDevice(%q): %v is not a usage error", c.in, err)
		}
	}
}

// gpuStandIn is a kernels.Device that says it is a GPU (a CPU device
// underneath).
type gpuStandIn struct{ *cpu.Device }

func (gpuStandIn) Name() string { return "cuda:7 (stand-in)" }

func deviceGlobals(t *testing.T, device string, open func(*Globals, int) (kernels.Device, error)) (*Globals, *bytes.Buffer) {
	var log bytes.Buffer
	return &Globals{Device: device, Threads: 1, Log: zerolog.New(&log), OpenGPU: open}, &log
}

func TestNewDeviceChoice(t *testing.T) {
	missing := errors.New("cuda: no usable libcuda (libcuda.so.1: cannot open shared object file)")
	noGPU := func(*Globals, int) (kernels.Device, error) { return nil, missing }
	var asked []int
	gpu := func(g *Globals, n int) (kernels.Device, error) {
		asked = append(asked, n)
		c, err := newCPU(g)
		return gpuStandIn{c}, err
	}

	// auto without a GPU: the CPU, logged with the reason.
	g, log := deviceGlobals(t, "auto", noGPU)
	d, err := newDevice(g)
	if err != nil || !strings.HasPrefix(d.Name(), "cpu/") {
		t.Fatalf("auto without a GPU: %v, %v", d, err)
	}
	if !strings.Contains(log.String(), "auto: no usable GPU") || !strings.Contains(log.String(), "libcuda.so.1") {
		t.Errorf("auto fallback log: %s", log.String())
	}
	// auto with a GPU: GPU 0.
	g, log = deviceGlobals(t, "", gpu)
	if d, err = newDevice(g); err != nil || d.Name() != "cuda:7 (stand-in)" || asked[0] != 0 {
		t.Fatalf("auto with a GPU: %v, %v, asked %v", d, err, asked)
	}
	if !strings.Contains(log.String(), "auto: a usable GPU") {
		t.Errorf("auto log: %s", log.String())
	}
	// cuda:2 asks for GPU 2.
	g, _ = deviceGlobals(t, "cuda:2", gpu)
	if _, err = newDevice(g); err != nil || asked[len(asked)-1] != 2 {
		t.Fatalf("cuda:2: %v, asked %v", err, asked)
	}
	// --device cuda without a GPU fails, naming what is missing.
	g, _ = deviceGlobals(t, "cuda", noGPU)
	if _, err = newDevice(g); err == nil || !strings.Contains(err.Error(), "--device cuda") || !strings.Contains(err.Error(), "libcuda.so.1") || !errors.Is(err, missing) {
		t.Fatalf("cuda without a GPU: %v", err)
	}
	// --device cpu never asks for a GPU.
	g, _ = deviceGlobals(t, "cpu", func(*Globals, int) (kernels.Device, error) { t.Fatal("asked for a GPU"); return nil, nil })
	if d, err = newDevice(g); err != nil || !strings.HasPrefix(d.Name(), "cpu/") {
		t.Fatalf("cpu: %v %v", d, err)
	}
}

// TestDeviceFlag: a bad --device is a usage error before any command runs;
// --device cuda on this machine fails with a message when there is no GPU.
func TestDeviceFlag(t *testing.T) {
	_, errOut, code := run(t, "--device", "tpu", "version")
	if code != exitUsage || !strings.Contains(errOut, `--device "tpu"`) {
		t.Errorf("--device tpu: code %d, %q", code, errOut)
	}
	if _, err := cuda.New(cuda.Options{}); err == nil {
		t.Skip("this machine has a usable GPU")
	}
	_, errOut, code = run(t, "--device", "cuda", "env", "--check")
	if code != exitError || !strings.Contains(errOut, "--device cuda: cuda: ") {
		t.Errorf("--device cuda without a GPU: code %d, %q", code, errOut)
	}
}

func TestEnvReport(t *testing.T) {
	var out bytes.Buffer
	g := &Globals{Out: &out, Threads: 1, Device: "auto", Log: zerolog.Nop()}
	opts := &EnvOptions{g: g,
		probe: func() *cuda.Report {
			return &cuda.Report{
				DriverPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", DriverVersion: "13.0",
				NVRTCPath: "/sp/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", NVRTCBuiltins: "/sp/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.8", NVRTCVersion: "12.8", NVRTCArchs: []int{75, 80, 90, 100},
				CublasPath: "/sp/nvidia/cublas/lib/libcublas.so.12", CublasLtPath: "/sp/nvidia/cublas/lib/libcublasLt.so.12", CublasVersion: "12.8.4",
				NCCLErr:  errors.New("cuda: no usable libnccl"),
				GPUs:     []cuda.GPUInfo{{Index: 0, Name: "NVIDIA H100 80GB HBM3", CC: "9.0", SMs: 132, TotalMemory: 85 << 30, FreeMemory: 84 << 30, PCIBusID: "0000:1B:00.0"}},
				CacheDir: "/root/.cache/gochat/nvrtc",
			}
		},
		probeMPI: func() mpi.ProbeResult { return mpi.ProbeResult{Err: errors.New("mpi: no usable MPI library")} },
	}
	if err := runEnv(opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CUDA:     driver /usr/lib/x86_64-linux-gnu/libcuda.so.1 (CUDA 13.0)",
		"NVRTC:    /sp/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 (12.8; builtins /sp/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.8; sm_75 to sm_100)",
		"cuBLAS:   /sp/nvidia/cublas/lib/libcublas.so.12 (cuBLASLt /sp/nvidia/cublas/lib/libcublasLt.so.12, version 12.8.4)",
		"GPU 0:    NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs, 85.0 GiB (84.0 GiB free), PCI 0000:1B:00.0",
		"NCCL:     not found (cuda: no usable libnccl)",
		"MPI:      not found (mpi: no usable MPI library)",
		"CPU:      cpu/",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gochat env lacks %q:\n%s", want, out.String())
		}
	}
}

// TestEnvCheckOnCPU runs gochat env --check --device cpu: the smoke test
// of a device's ops, on the CPU here.
func TestEnvCheckOnCPU(t *testing.T) {
	out, errOut, code := run(t, "--device", "cpu", "env", "--check")
	if code != 0 || !strings.Contains(out, "check:    ok") {
		t.Fatalf("code %d\n%s\n%s", code, out, errOut)
	}
}

func TestParseByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false}, {"1048576", 1 << 20, false}, {"512B", 512, false}, {"16GiB", 16 << 30, false}, {"16g", 16 << 30, false},
		{"16 GiB", 16 << 30, false}, {"13.5GiB", 27 << 29, false}, {"20GB", 20e9, false}, {"300MB", 300e6, false},
		{"2TiB", 2 << 40, false}, {"64k", 64 << 10, false},
		{"", 0, true}, {"GiB", 0, true}, {"-1GiB", 0, true}, {"16 gibibytes", 0, true}, {"1e3", 0, true}, {"9999999TiB", 0, true}, {"1.2.3G", 0, true},
	} {
		got, err := parseByteSize(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.bad)
		}
	}
}

// TestGPUMemoryLimit: --gpu-memory-limit, else $GOCHAT_CUDA_MEMORY_LIMIT,
// becomes kernels/cuda's Options.MemLimit for every GPU the commands open
// (cudaOptions, what openCUDA passes to cuda.New; kernels/cuda's TestMemLimit
// checks the allocator and MemInfo under it); the flag wins over the
// variable; a malformed size is a usage error naming where it came from.
func TestGPUMemoryLimit(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == gpuMemoryLimitEnv {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		flag    string
		flagSet bool
		env     string
		want    int64
		errHas  string
	}{
		{want: 0},
		{env: "20GiB", want: 20 << 30},
		{flag: "16GiB", flagSet: true, env: "20GiB", want: 16 << 30},
		{flag: "0", flagSet: true, env: "20GiB", want: 0},
		{flag: "lots", flagSet: true, errHas: `--gpu-memory-limit "lots"`},
		{env: "-3G", errHas: gpuMemoryLimitEnv + ` "-3G"`},
	} {
		g := &Globals{GPUMemLimit: c.flag}
		err := resolveGPUMemoryLimit(g, c.flagSet, env(c.env))
		if c.errHas != "" {
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), c.errHas) || !errors.As(err, &ue) {
				t.Errorf("flag %q env %q: error %v, want a usage error with %q", c.flag, c.env, err, c.errHas)
			}
			continue
		}
		if err != nil || g.gpuMemLimit != c.want {
			t.Errorf("flag %q env %q: %d, %v; want %d", c.flag, c.env, g.gpuMemLimit, err, c.want)
		}
		if o := cudaOptions(g, 3); o.MemLimit != c.want || o.Ordinal != 3 || o.OnBuild == nil {
			t.Errorf("flag %q env %q: cuda.Options %+v, want MemLimit %d on ordinal 3", c.flag, c.env, o, c.want)
		}
	}

	// Through the command line: the flag reaches the Globals a GPU is
	// opened with.
	var got int64 = -1
	g := &Globals{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{},
		OpenGPU: func(g *Globals, n int) (kernels.Device, error) {
			got = cudaOptions(g, n).MemLimit
			c, err := newCPU(g)
			return gpuStandIn{c}, err
		}}
	if code := execute(g, []string{"--device", "cuda", "--gpu-memory-limit", "12GiB", "bench", "decode", "--model", "llama-tiny", "--batch", "1", "--prompt", "1", "--new", "1", "--runs", "1", "--dtype", "fp32"}); code != 0 || got != 12<<30 {
		t.Fatalf("exit %d, MemLimit %d; want 0 and 12 GiB", code, got)
	}
}
