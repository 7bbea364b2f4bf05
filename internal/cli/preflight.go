package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/hub"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/plan"
)

// skipPreflightHelp is the help text of --skip-preflight.
const skipPreflightHelp = "run even when the memory planner estimates that the step does not fit in the available memory"

// availableMemory is what the machine offers (plan.Available on the root
// file system, or the test's fake).
func (g *Globals) availableMemory() (plan.Memory, error) {
	if g.Memory != nil {
		return g.Memory()
	}
	m, err := plan.Available(os.DirFS("/"))
	if err != nil {
		return m, err
	}
	// The ranks of an MPI job on this machine share its memory: each plans
	// for (and its garbage collector aims at) its part.
	return m.Share(mpi.DetectLaunch().LocalSize), nil
}

// launchParallel is how an MPI launcher started this step on dev, for the
// planner: its ranks with the given ZeRO stages (one process outside
// one), on a GPU when dev is one (gpuMemory).
func launchParallel(dev kernels.Device, stage, actorStage, criticStage int) plan.Parallel {
	_, gpu := dev.(gpuMemory)
	if l := mpi.DetectLaunch(); l.Launched() && l.Size > 1 {
		return plan.Parallel{Ranks: l.Size, Stage: stage, ActorStage: actorStage, CriticStage: criticStage, Gochat: true, GPU: gpu}
	}
	return plan.Parallel{GPU: gpu}
}

// gpuMemory is a GPU whose memory the pre-flight reads: kernels/cuda's
// Device (MemInfo: the driver's cuMemGetInfo), or a test's stand-in. The
// planner treats a device without it as the CPU, whose memory is the
// host's.
type gpuMemory interface {
	kernels.Device
	MemInfo() (free, total int64, err error)
}

// budget is what the machine offers a step on its device: host memory,
// and on a GPU the GPU's free memory (read after the device is open, so
// gochat's CUDA context is not in it; plan.GPUReserve is the margin kept
// for what the planner does not count).
type budget struct {
	plan.Budget
	mem             plan.Memory
	gpu             string // the GPU's name; "" on the CPU
	gpuFree, gpuAll int64
}

// stepBudget reads what the machine offers a step on dev (nil: the CPU).
func stepBudget(g *Globals, dev kernels.Device) (budget, error) {
	mem, err := g.availableMemory()
	if err != nil {
		return budget{}, err
	}
	b := budget{Budget: plan.Budget{Host: mem.Available}, mem: mem}
	if gm, ok := dev.(gpuMemory); ok {
		free, total, err := gm.MemInfo()
		if err != nil {
			return budget{}, fmt.Errorf("free memory of %s: %w", gm.Name(), err)
		}
		b.GPU, b.gpu, b.gpuFree, b.gpuAll = free, gm.Name(), free, total
	}
	return b, nil
}

// String describes the budget for a message.
func (b budget) String() string {
	if b.gpu == "" {
		return b.mem.String()
	}
	return fmt.Sprintf("GPU %s: %s free of %s; host: %s", b.gpu, plan.GiB(b.gpuFree), plan.GiB(b.gpuAll), b.mem)
}

// modelConfig is the architecture of the model a flag names, all the
// planner needs, found without loading or downloading anything: the
// config.json of a directory, or of the Hub id's snapshot in the Hugging
// Face cache at revision (short forms such as 1.3b included), or a
// built-in architecture (opt-1.3b, facebook/opt-1.3b).
func modelConfig(g *Globals, flag, name, revision string) (*model.Config, error) {
	read := func(path string) (*model.Config, error) {
		c, err := model.LoadConfig(path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, name, err)
		}
		return c, nil
	}
	path := filepath.Join(name, "config.json")
	if _, err := os.Stat(path); err == nil {
		return read(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s %s: %w", flag, name, err)
	}
	id := hub.ModelID(name)
	if hub.ValidID(id) == nil {
		if dir, _, err := hub.Lookup(newHub(g).Cache, hub.Repo{Type: hub.Model, ID: id}, revision); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
				return read(filepath.Join(dir, "config.json"))
			}
		}
	}
	c, err := model.PresetConfig(id)
	if err != nil {
		return nil, usageErrorf("%s %s: no config.json there or in the Hugging Face cache, and not a built-in architecture (%s); the memory pre-flight needs it (--skip-preflight goes without)",
			flag, name, strings.Join(model.PresetNames(), ", "))
	}
	return c, nil
}

// resolveAndPreflight resolves a step's models (resolve) and runs its
// memory pre-flight (preflight): before resolving when modelConfig finds
// every named model's architecture (flag, name pairs) without downloading
// anything — a directory, the Hugging Face cache, a built-in architecture
// — so that a run that cannot fit downloads nothing; otherwise after.
func resolveAndPreflight(g *Globals, revision string, resolve, preflight func() error, models ...[2]string) error {
	early := true
	for _, m := range models {
		if _, err := modelConfig(g, m[0], m[1], revision); err != nil {
			early = false
			break
		}
	}
	if early {
		if err := preflight(); err != nil {
			return err
		}
	}
	if err := resolve(); err != nil {
		return err
	}
	if early {
		return nil
	}
	return preflight()
}

// planDType is the parameters' type a step on dev will use for --dtype
// (auto picks bf16 where the device computes it natively; nil dev: the
// CPU), decided without logging.
func planDType(g *Globals, name string, dev kernels.Device) (kernels.DType, error) {
	if dev == nil {
		c, err := newCPU(g)
		if err != nil {
			return 0, err
		}
		dev = c
	}
	return pickDType(name, dev)
}

// preflight is a step's memory check before it loads anything: it logs
// the planner's estimate against what the machine offers the step on dev
// (stepBudget: on a GPU its free memory and the host's apart, on the CPU
// the host's), tunes the garbage collector (tuneGC), and refuses a step
// that does not fit, naming which memory, its largest parts and the
// changes that would fit both (fit), unless skip (--skip-preflight).
func preflight(g *Globals, dev kernels.Device, what string, est *plan.Estimate, fit func(plan.Budget) []plan.Change, skip bool) error {
	b, err := stepBudget(g, dev)
	if err != nil {
		g.Log.Warn().Err(err).Str("step", what).Int64("estimated_peak_bytes", est.Peak).Msg("memory pre-flight skipped: the available memory is unknown")
		return nil
	}
	tuneGC(g, b.mem)
	ev := g.Log.Info().Str("step", what).Str("dtype", est.DType).Int64("estimated_peak_bytes", est.Peak).
		Int64("host_state_bytes", est.Host).Int64("available_bytes", b.mem.Available)
	if est.GPU {
		ev.Int64("estimated_host_peak_bytes", est.HostPeak).Int64("gpu_free_bytes", b.GPU).
			Msgf("memory plan: estimated GPU peak %s, host %s; %s", plan.GiB(est.Peak), plan.GiB(est.HostPeak), b)
	} else {
		ev.Msgf("memory plan: estimated peak %s of %s", plan.GiB(est.Peak), b)
	}
	if est.Fits(b.Budget) {
		return nil
	}
	msg := refusal(what, est, b, fit(b.Budget))
	if skip {
		g.Log.Warn().Msg(msg + " (--skip-preflight: running anyway)")
		return nil
	}
	return usageError{errors.New(msg + "; or pass --skip-preflight to run anyway")}
}

// refusal says why a step does not fit (which memory: a GPU's, the
// host's) and what would.
func refusal(what string, est *plan.Estimate, b budget, changes []plan.Change) string {
	var s strings.Builder
	over, hostNeed := est.Over(b.Budget)
	switch {
	case !est.GPU || b.gpu == "":
		fmt.Fprintf(&s, "%s does not fit in memory: estimated peak %s, %s.", what, plan.GiB(est.Peak), b.mem)
	default:
		which := map[plan.Overrun]string{{GPU: true}: "GPU memory", {Host: true}: "host memory", {GPU: true, Host: true}: "GPU or host memory"}[over]
		verdict := func(o bool) string {
			if o {
				return "does not fit"
			}
			return "fits"
		}
		fmt.Fprintf(&s, "%s does not fit in %s: GPU %s: %s needed (device peak %s + %s reserve), %s free of %s (%s); host: %s needed, %s (%s).",
			what, which, b.gpu, plan.GiB(est.Peak), plan.GiB(est.Device), plan.GiB(est.Runtime), plan.GiB(b.gpuFree), plan.GiB(b.gpuAll),
			verdict(over.GPU), plan.GiB(hostNeed), b.mem, verdict(over.Host))
	}
	// The parts of the memory that does not fit: on a GPU, what the host
	// holds apart from the rest.
	var parts []plan.Part
	for _, p := range est.Parts() {
		onHost := strings.Contains(p.Name, "on the host")
		if !est.GPU || (over.GPU && !onHost) || (over.Host && onHost) {
			parts = append(parts, p)
		}
	}
	if len(parts) > 6 {
		parts = parts[:6]
	}
	if len(parts) > 0 {
		s.WriteString(" Largest parts:")
	}
	for i, p := range parts {
		if i > 0 {
			s.WriteString(",")
		}
		fmt.Fprintf(&s, " %s %s", p.Name, plan.GiB(p.Bytes))
	}
	switch {
	case len(changes) == 0:
		s.WriteString(". No change the planner knows of fits (gochat estimate shows the parts); use a machine with more memory")
	case len(changes) == 1:
		fmt.Fprintf(&s, ". What would fit: %s", changes[0])
	default:
		s.WriteString(". Each of these would fit, least change to training first:")
		for i, c := range changes {
			if i > 0 {
				s.WriteString(";")
			}
			fmt.Fprintf(&s, " %s", c)
		}
	}
	return s.String()
}

// tuneGC sets the garbage collector up for a training step, unless the
// environment sets GOGC or GOMEMLIMIT: GOGC to plan.GCPercent (device
// buffers hold no pointers, so frequent collections are cheap, and freed
// buffers do not pile up to twice the live memory), and a soft memory
// limit of the available memory, so that the collector works harder
// before the kernel would kill the process.
func tuneGC(g *Globals, mem plan.Memory) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(plan.GCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" && mem.Available > 0 {
		debug.SetMemoryLimit(mem.Available)
	}
}

// cachingDevice is a device whose allocator holds memory beyond its live
// buffers (kernels/cuda: cached blocks, rounding): CacheStats' peak is the
// most it held from the GPU, what the GPU's own tools see of the step.
type cachingDevice interface {
	CacheStats() (inUse, cached, reserved, peak int64)
}

// logMemory logs a finished step's device peak (the high-water mark of
// live buffers, which the planner estimates; on a GPU also the most its
// allocator held, cache included) and peak RSS.
func logMemory(g *Globals, dev kernels.Device, what string) {
	peak := dev.MemStats().Peak
	ev := g.Log.Info().Str("step", what).Str("device", dev.Name()).Int64("device_peak_bytes", peak).Int64("peak_rss_bytes", peakRSS())
	held := ""
	if c, ok := dev.(cachingDevice); ok {
		_, _, _, reserved := c.CacheStats()
		ev = ev.Int64("device_reserved_peak_bytes", reserved)
		held = fmt.Sprintf(" (allocator held at most %s)", plan.GiB(reserved))
	}
	ev.Msgf("memory: device peak %s%s, peak RSS %s", plan.GiB(peak), held, plan.GiB(peakRSS()))
}
