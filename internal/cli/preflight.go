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

// launchParallel is how an MPI launcher started this step, for the
// planner: its ranks with the given ZeRO stages (one process outside
// one).
func launchParallel(stage, actorStage, criticStage int) plan.Parallel {
	if l := mpi.DetectLaunch(); l.Launched() && l.Size > 1 {
		return plan.Parallel{Ranks: l.Size, Stage: stage, ActorStage: actorStage, CriticStage: criticStage, Gochat: true}
	}
	return plan.Parallel{}
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

// planDType is the parameters' type a step will use for --dtype (auto
// picks bf16 where the CPU computes it natively), decided without logging.
func planDType(g *Globals, name string) (kernels.DType, error) {
	dev, err := newCPU(g)
	if err != nil {
		return 0, err
	}
	return pickDType(name, dev)
}

// preflight is a step's memory check before it loads anything: it logs
// the planner's estimate against the available memory, tunes the garbage
// collector (tuneGC), and refuses a step whose estimated peak exceeds the
// available memory, naming its largest parts and the changes that would
// fit (fit), unless skip (--skip-preflight).
func preflight(g *Globals, what string, est *plan.Estimate, fit func(budget int64) []plan.Change, skip bool) error {
	mem, err := g.availableMemory()
	if err != nil {
		g.Log.Warn().Err(err).Str("step", what).Int64("estimated_peak_bytes", est.Peak).Msg("memory pre-flight skipped: the available memory is unknown")
		return nil
	}
	tuneGC(g, mem)
	g.Log.Info().Str("step", what).Str("dtype", est.DType).Int64("estimated_peak_bytes", est.Peak).
		Int64("host_state_bytes", est.Host).Int64("available_bytes", mem.Available).
		Msgf("memory plan: estimated peak %s of %s", plan.GiB(est.Peak), mem)
	// The host memory holds the peak, and, where the estimate keeps
	// ZeRO-Offload's host state apart from a GPU's peak, that state too.
	need := est.Peak
	if est.HostPeak > 0 {
		need += est.Host
	}
	if need <= mem.Available {
		return nil
	}
	msg := refusal(what, est, mem, fit(mem.Available))
	if skip {
		g.Log.Warn().Msg(msg + " (--skip-preflight: running anyway)")
		return nil
	}
	return usageError{errors.New(msg + "; or pass --skip-preflight to run anyway")}
}

// refusal says why a step does not fit and what would.
func refusal(what string, est *plan.Estimate, mem plan.Memory, changes []plan.Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not fit in memory: estimated peak %s, %s.", what, plan.GiB(est.Peak), mem)
	parts := est.Parts()
	if len(parts) > 6 {
		parts = parts[:6]
	}
	b.WriteString(" Largest parts:")
	for i, p := range parts {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s %s", p.Name, plan.GiB(p.Bytes))
	}
	switch {
	case len(changes) == 0:
		b.WriteString(". No change the planner knows of fits (gochat estimate shows the parts); use a machine with more memory")
	case len(changes) == 1:
		fmt.Fprintf(&b, ". What would fit: %s", changes[0])
	default:
		b.WriteString(". Each of these would fit, least change to training first:")
		for i, c := range changes {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %s", c)
		}
	}
	return b.String()
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

// logMemory logs a finished step's device peak and peak RSS beside the
// planner's estimate.
func logMemory(g *Globals, dev kernels.Device, what string) {
	g.Log.Info().Str("step", what).Int64("device_peak_bytes", dev.MemStats().Peak).Int64("peak_rss_bytes", peakRSS()).
		Msgf("memory: device peak %s, peak RSS %s", plan.GiB(dev.MemStats().Peak), plan.GiB(peakRSS()))
}
