package cli

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

// EnvOptions are the options of `gochat env`.
type EnvOptions struct {
	g *Globals
	// Check opens the device --device picks and runs a few ops on it
	// (on a GPU: the kernels are compiled, or taken from the cache).
	Check bool
	// probe and probeMPI report the CUDA libraries and MPI (tests fake them).
	probe    func() *cuda.Report
	probeMPI func() mpi.ProbeResult
}

func newEnvCmd(g *Globals, runF func(*EnvOptions) error) *cobra.Command {
	opts := &EnvOptions{g: g, probe: cuda.Probe, probeMPI: mpi.Probe}
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print what gochat finds on this machine: CPU, CUDA libraries and GPUs, MPI, NCCL",
		Long: `Print the compute environment: the CPU backend, the CUDA driver, NVRTC and
cuBLAS libraries with their paths and versions, each GPU with its memory and
compute capability, MPI and NCCL, and the device --device picks. It is the
first thing to run when a GPU is not used or MPI is not found. With --check
it also opens that device and runs a few ops on it.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runEnv(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Check, "check", false, "open the device --device picks and run a few ops on it")
	return cmd
}

func runEnv(opts *EnvOptions) error {
	g := opts.g
	w := &errWriter{w: g.Out}
	v, rev := buildVersion()
	w.printf("gochat %s (%s, %s, %s/%s)\n", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if c, err := newCPU(g); err != nil {
		w.printf("CPU:      %v\n", err)
	} else {
		w.printf("CPU:      %s, %d cores, native bf16: %v\n", c.Name(), runtime.NumCPU(), c.NativeBF16())
	}
	writeCUDAReport(w, opts.probe())
	m := opts.probeMPI()
	if m.Err != nil && m.Path == "" {
		w.printf("MPI:      not found (%v)\n", m.Err)
	} else {
		w.printf("MPI:      %s at %s (%s)", m.Flavour, m.Path, m.Version)
		if m.Err != nil {
			w.printf(": %v", m.Err)
		}
		w.printf("\n")
	}
	if w.err != nil {
		return w.err
	}
	if opts.Check {
		return envCheck(g, w)
	}
	spec, _ := parseDevice(g.Device)
	w.printf("device:   --device %s (gochat env --check opens it and runs a few ops)\n", spec.Kind)
	return w.err
}

// writeCUDAReport prints the CUDA part of gochat env.
func writeCUDAReport(w *errWriter, r *cuda.Report) {
	if r.DriverErr != nil {
		w.printf("CUDA:     no driver (%v)\n", r.DriverErr)
	} else {
		w.printf("CUDA:     driver %s (CUDA %s)\n", r.DriverPath, r.DriverVersion)
		if r.NVRTCErr != nil {
			w.printf("NVRTC:    %v\n", r.NVRTCErr)
		} else {
			w.printf("NVRTC:    %s (%s", r.NVRTCPath, r.NVRTCVersion)
			if r.NVRTCBuiltins != "" {
				w.printf("; builtins %s", r.NVRTCBuiltins)
			}
			if len(r.NVRTCArchs) > 0 {
				w.printf("; sm_%d to sm_%d", r.NVRTCArchs[0], r.NVRTCArchs[len(r.NVRTCArchs)-1])
			}
			w.printf(")\n")
		}
		if r.CublasErr != nil {
			w.printf("cuBLAS:   %v\n", r.CublasErr)
		} else {
			w.printf("cuBLAS:   %s (cuBLASLt %s, version %s)\n", r.CublasPath, orNone(r.CublasLtPath), orNone(r.CublasVersion))
		}
		if r.GPUErr != nil {
			w.printf("GPUs:     %v\n", r.GPUErr)
		}
		if len(r.GPUs) == 0 && r.GPUErr == nil {
			w.printf("GPUs:     none\n")
		}
		for _, gi := range r.GPUs {
			w.printf("GPU %d:    %s, compute capability %s, %d SMs, %s", gi.Index, gi.Name, gi.CC, gi.SMs, gib(gi.TotalMemory))
			if gi.FreeMemory > 0 {
				w.printf(" (%s free)", gib(gi.FreeMemory))
			}
			if gi.PCIBusID != "" {
				w.printf(", PCI %s", gi.PCIBusID)
			}
			w.printf("\n")
		}
		w.printf("kernels:  compiled by NVRTC into %s\n", orNone(r.CacheDir))
	}
	multi := "mpirun -np N gochat ... with one GPU a rank"
	switch {
	case r.NCCLErr != nil:
		w.printf("NCCL:     not found (%v); %s would reduce over MPI through host memory\n", r.NCCLErr, multi)
	case len(r.GPUs) == 0:
		w.printf("NCCL:     %s (%s); unused here: no GPU\n", r.NCCLPath, orNone(r.NCCLVersion))
	default:
		w.printf("NCCL:     %s (%s); %s uses it (--dist auto; %d GPU(s) here)\n", r.NCCLPath, orNone(r.NCCLVersion), multi, len(r.GPUs))
	}
}

// envCheck opens the device --device picks and runs an Add and a GEMM (in
// fp32 and bf16) on it, comparing with the exact answers.
func envCheck(g *Globals, w *errWriter) error {
	start := time.Now()
	dev, err := newDevice(g)
	if err != nil {
		return err
	}
	w.printf("device:   %s\n", dev.Name())
	if err := smokeTest(dev); err != nil {
		return fmt.Errorf("check of %s: %w", dev.Name(), err)
	}
	w.printf("check:    ok: Add, fp32 and bf16 GEMMs give the exact answers (%.1fs, kernels built or loaded included)\n", time.Since(start).Seconds())
	if c, ok := dev.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return w.err
}

// smokeTest runs a few ops whose answers are exact in fp32 and in bf16.
func smokeTest(dev kernels.Device) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	var bufs []kernels.Buffer
	alloc := func(dt kernels.DType, vals []float32) kernels.Buffer {
		b, aerr := dev.Alloc(dt, len(vals))
		if aerr != nil {
			panic(aerr)
		}
		bufs = append(bufs, b)
		dev.WriteF32(b, vals)
		return b
	}
	defer func() {
		for _, b := range bufs {
			dev.Free(b)
		}
	}()
	a, b := alloc(kernels.F32, []float32{1, 2, 3}), alloc(kernels.F32, []float32{0.5, -4, 8})
	dev.Add(a, a, b, 3)
	// [2,3]·[3,2]: A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]] -> [[4,5],[10,11]]
	want := []float32{4, 5, 10, 11}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		ma, mb := alloc(kernels.F32, []float32{1, 2, 3, 4, 5, 6}), alloc(dt, []float32{1, 0, 0, 1, 1, 1})
		c := alloc(kernels.F32, []float32{float32(math.NaN()), 0, 0, 0})
		dev.Gemm(false, false, 2, 2, 3, 1, ma, 3, mb, 2, 0, c, 2)
		if err := dev.Sync(); err != nil {
			return err
		}
		got := make([]float32, 4)
		dev.ReadF32(got, c)
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("%v GEMM gave %v, want %v", dt, got, want)
			}
		}
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	got := make([]float32, 3)
	dev.ReadF32(got, a)
	if got[0] != 1.5 || got[1] != -2 || got[2] != 11 {
		return fmt.Errorf("Add gave %v, want [1.5 -2 11]", got)
	}
	return nil
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
