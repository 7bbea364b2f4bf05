package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/kernels/cuda"
	"github.com/gochat-ai/gochat/plan"
)

// newCPU returns the CPU backend with the --threads setting.
func newCPU(g *Globals) (*cpu.Device, error) {
	return cpu.New(cpu.Options{Threads: g.Threads})
}

// flashAttention reports whether the backend --device names runs attention
// through kernels.FlashAttention (its layers keep lse[B,NH,T], not
// att[B,NH,T,T]), which the memory planner needs before any device is
// opened: the named backend's type says, and auto (or a --device that does
// not parse, which fails later) may run on either.
func flashAttention(g *Globals) bool {
	_, onCPU := any((*cpu.Device)(nil)).(kernels.FlashAttention)
	_, onGPU := any((*cuda.Device)(nil)).(kernels.FlashAttention)
	spec, err := parseDevice(g.Device)
	switch {
	case err == nil && spec.Kind == "cpu":
		return onCPU
	case err == nil && spec.Kind == "cuda":
		return onGPU
	}
	return onCPU && onGPU
}

// parseDevice parses --device (kernels.ParseDevice), its error a usage
// error.
func parseDevice(s string) (kernels.DeviceSpec, error) {
	spec, err := kernels.ParseDevice(s)
	if err != nil {
		return spec, usageErrorf("--%v", err)
	}
	return spec, nil
}

// openGPU opens GPU ordinal through g.OpenGPU, or kernels/cuda.
func openGPU(g *Globals, ordinal int) (kernels.Device, error) {
	if g.OpenGPU != nil {
		return g.OpenGPU(g, ordinal)
	}
	return openCUDA(g, ordinal)
}

// openCUDA opens GPU ordinal with kernels/cuda (cudaOptions).
func openCUDA(g *Globals, ordinal int) (kernels.Device, error) {
	d, err := cuda.New(cudaOptions(g, ordinal))
	if err != nil {
		return nil, err
	}
	if g.gpuMemLimit > 0 {
		g.Log.Info().Int64("gpu_memory_limit_bytes", g.gpuMemLimit).Str("device", d.Name()).
			Msgf("cuda: device memory capped at %s (--gpu-memory-limit or %s)", plan.GiB(g.gpuMemLimit), gpuMemoryLimitEnv)
	}
	return d, nil
}

// cudaOptions are the kernels/cuda options of GPU ordinal: the memory cap
// of --gpu-memory-limit, and kernel builds logged.
func cudaOptions(g *Globals, ordinal int) cuda.Options {
	return cuda.Options{Ordinal: ordinal, MemLimit: g.gpuMemLimit, OnBuild: func(target string, cached bool) {
		if cached {
			g.Log.Debug().Str("target", target).Msg("cuda: kernels from the disk cache")
		} else {
			g.Log.Info().Str("target", target).Msg("cuda: kernels compiled (once per GPU architecture and gochat version)")
		}
	}}
}

// gpuMemoryLimitEnv is the default of --gpu-memory-limit.
const gpuMemoryLimitEnv = "GOCHAT_CUDA_MEMORY_LIMIT"

// gpuMemoryLimitHelp is the help text of --gpu-memory-limit.
const gpuMemoryLimitHelp = "cap on the device memory gochat's CUDA allocator holds (live buffers, its cache and mapped chunks), " +
	"e.g. 16GiB, 20GB or bytes; an allocation past it fails with the numbers, and the memory pre-flight plans the GPU as that size. " +
	"0: the GPU's memory (default $" + gpuMemoryLimitEnv + ")"

// resolveGPUMemoryLimit parses --gpu-memory-limit, or when the flag is not
// given $GOCHAT_CUDA_MEMORY_LIMIT (getenv), into g.gpuMemLimit.
func resolveGPUMemoryLimit(g *Globals, flagSet bool, getenv func(string) string) error {
	s, from := g.GPUMemLimit, "--gpu-memory-limit"
	if !flagSet {
		s, from = getenv(gpuMemoryLimitEnv), gpuMemoryLimitEnv
	}
	if s == "" {
		g.gpuMemLimit = 0
		return nil
	}
	n, err := parseByteSize(s)
	if err != nil {
		return usageErrorf("%s %q: %v", from, s, err)
	}
	g.gpuMemLimit = n
	return nil
}

// parseByteSize parses a size in bytes: a number, optionally fractional,
// with an optional unit, case-insensitive: B; K, M, G, T and KiB, MiB,
// GiB, TiB (powers of 1024, as nvidia-smi and PyTorch count GPU memory);
// KB, MB, GB, TB (powers of 1000).
func parseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	units := map[string]float64{"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
	mul, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (want B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("want a size such as 16GiB, 20GB or a number of bytes")
	}
	b := v * mul
	if b >= 1<<62 {
		return 0, fmt.Errorf("too large")
	}
	return int64(b), nil
}

// localGPU returns the GPU a rank takes when --device does not name one:
// under an MPI launcher that announced this process's local rank, the GPU
// of that index (one GPU a rank, as DeepSpeed's launcher gives
// LOCAL_RANK its GPU), else GPU 0. why says which, for errors and logs
// ("" for GPU 0 of a single process).
func localGPU(spec kernels.DeviceSpec, l mpi.Launch) (ordinal int, why string) {
	if spec.Named || !l.Launched() || l.LocalRank < 0 {
		return spec.Ordinal, ""
	}
	local := "?"
	if l.LocalSize >= 0 {
		local = strconv.Itoa(l.LocalSize)
	}
	return l.LocalRank, fmt.Sprintf("local rank %d of %s on this node", l.LocalRank, local)
}

// newDevice returns the compute device --device asks for: the CPU, GPU N,
// or (auto) a GPU when one is usable and the CPU otherwise, logging which
// and why. Under an MPI launcher, cuda and auto take the GPU of the
// process's local rank (localGPU). --device cuda on a machine without a
// usable GPU fails with what is missing (a library, every path tried; the
// driver; the GPU), and a rank whose GPU does not exist says so.
func newDevice(g *Globals) (kernels.Device, error) {
	spec, err := parseDevice(g.Device)
	if err != nil {
		return nil, err
	}
	ordinal, why := localGPU(spec, mpi.DetectLaunch())
	switch spec.Kind {
	case "cpu":
		return newCPU(g)
	case "cuda":
		d, err := openGPU(g, ordinal)
		if err != nil {
			if why != "" {
				return nil, fmt.Errorf("--device %s: %s takes cuda:%d: %w (one GPU a rank: start at most as many ranks a node as it has GPUs)", g.Device, why, ordinal, err)
			}
			return nil, fmt.Errorf("--device %s: %w (gochat env shows what was found)", g.Device, err)
		}
		if why != "" {
			g.Log.Info().Str("device", d.Name()).Msgf("device: %s (%s)", d.Name(), why)
		} else {
			g.Log.Info().Str("device", d.Name()).Msg("device: " + d.Name())
		}
		return d, nil
	}
	d, err := openGPU(g, ordinal)
	if err == nil {
		if why != "" {
			why = "; " + why
		}
		g.Log.Info().Str("device", d.Name()).Msgf("device: %s (auto: a usable GPU%s; --device cpu to change)", d.Name(), why)
		return d, nil
	}
	c, cerr := newCPU(g)
	if cerr != nil {
		return nil, cerr
	}
	g.Log.Info().Str("device", c.Name()).Str("why", err.Error()).Msgf("device: %s (auto: no usable GPU)", c.Name())
	return c, nil
}

// trainStepDevice returns the device the steps of gochat train compute on,
// given dev, the device train opened and joined the ranks with: dev itself
// on a GPU, nil on the CPU, where each step opens its own device as a lone
// step command does.
//
// On a GPU one device a rank serves the whole job. The communicator is
// built on it, and NCCL's Comm (as MPI's staging through the device)
// takes that device's buffers only, so steps on devices of their own
// could not reduce their gradients; and a GPU's memory comes back by
// freeing it on the device that holds it, which stepDevice does as each
// step ends, where a device a step would also hold its own CUDA stream,
// cuBLAS handle and kernels. On the CPU a step's memory is the process's,
// handed back between the steps by releaseMemory: the CPU runs are
// unchanged.
func trainStepDevice(dev kernels.Device) kernels.Device {
	if _, ok := dev.(*cpu.Device); ok {
		return nil
	}
	return dev
}

// stepScoped is a device that several steps use in turn (kernels/cuda's
// Device): Mark where a step's allocations begin, ReleaseSince frees what
// it left and returns the cached memory to the driver, ResetPeak restarts
// the peak counts, Trim empties the cache.
type stepScoped interface {
	Mark() cuda.Mark
	ReleaseSince(cuda.Mark) (freed int64)
	ResetPeak()
	Trim()
}

// stepDevice returns the device a training step (gochat sft, reward or
// ppo, alone or as a step of gochat train) computes on, and end, which
// the step calls with its error as it returns, after its communicator is
// finished. shared is gochat train's device for its steps
// (trainStepDevice); nil opens --device's (newDevice).
//
// On a shared device the step starts with the cache emptied and the peaks
// restarted (it logs its own), and end frees every buffer the step
// allocated and left live — its models, optimizer state, caches — and
// returns the cached memory to the driver, so that the next step's
// pre-flight finds the GPU as free as this one did. A GPU the step opened
// itself is closed by end, which frees all it held.
func stepDevice(g *Globals, shared kernels.Device, what string) (dev kernels.Device, end func(error) error, err error) {
	if shared == nil {
		if dev, err = newDevice(g); err != nil {
			return nil, nil, err
		}
		return dev, func(err error) error { closeDevice(g, dev); return err }, nil
	}
	s, ok := shared.(stepScoped)
	if !ok {
		return shared, func(err error) error { return err }, nil
	}
	s.Trim()
	s.ResetPeak()
	mark := s.Mark()
	return shared, func(err error) error {
		freed := s.ReleaseSince(mark)
		g.Log.Debug().Str("step", what).Str("device", shared.Name()).Int64("freed_bytes", freed).
			Msgf("device: %s of the step's buffers freed, the cache returned to the driver", plan.GiB(freed))
		return err
	}, nil
}

// closeDevice closes dev when it is a GPU (kernels/cuda's Close frees the
// memory it held and releases its context); a CPU device has nothing to
// close. An error is logged: the work was done.
func closeDevice(g *Globals, dev kernels.Device) {
	c, ok := dev.(interface{ Close() error })
	if !ok {
		return
	}
	if err := c.Close(); err != nil {
		g.Log.Warn().Err(err).Str("device", dev.Name()).Msg("device: close failed")
	}
}
