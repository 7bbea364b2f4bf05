// Package cli holds gochat's cobra commands. Each command has an Options
// struct, a constructor newXCmd(g, runF) that binds flags, and a runX(opts)
// that does the work; tests replace runF to check flag parsing. Errors are
// mapped to exit codes in one place, Main.
package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/plan"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitInterrupted: a run stopped by a signal (128 + SIGINT, as shells
	// report it), with its checkpoint saved or, after a second signal,
	// at once.
	exitInterrupted = 130
)

// usageError marks an error caused by bad flags or arguments.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// Globals are the settings shared by every command.
type Globals struct {
	In       io.Reader
	Out      io.Writer
	Err      io.Writer
	LogLevel string
	LogFmt   string
	Threads  int
	CPUProf  string
	Log      zerolog.Logger
	// Memory reports what the machine offers the memory pre-flight (nil:
	// plan.Available on the root file system; tests fake it).
	Memory func() (plan.Memory, error)
	// Stop is closed when the user asks a run to stop (watchSignals);
	// training commands then stop at their next safe point with a
	// checkpoint. nil: never.
	Stop <-chan struct{}
	// Device is --device: auto, cpu, cuda or cuda:N (newDevice).
	Device string
	// Dist is --dist: which communicator a multi-rank job uses (auto:
	// NCCL when every rank is on a GPU, else MPI; mpi; nccl).
	Dist string
	// GPUMemLimit is --gpu-memory-limit as given; gpuMemLimit its bytes
	// (from $GOCHAT_CUDA_MEMORY_LIMIT when the flag is not given; 0: no
	// cap), passed to kernels/cuda as Options.MemLimit.
	GPUMemLimit string
	gpuMemLimit int64
	// OpenGPU opens GPU N for newDevice (nil: kernels/cuda; tests fake it).
	OpenGPU  func(g *Globals, ordinal int) (kernels.Device, error)
	stopProf func()
}

// Main runs gochat with args and returns the process exit code.
func Main(args []string, in io.Reader, out, errw io.Writer) int {
	return execute(&Globals{In: in, Out: out, Err: errw}, args)
}

// execute runs gochat with args on g's streams (and g.Memory, for tests).
func execute(g *Globals, args []string) int {
	in, errw := g.In, g.Err
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(g.Out)
	root.SetErr(errw)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(errw, "gochat: %v\n", err)
	if interrupted(err) {
		return exitInterrupted
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	return exitError
}

// isCobraUsage recognises cobra's own flag and argument errors.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown command", "unknown shorthand", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func newRootCmd(g *Globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "gochat",
		Short: "RLHF training for causal language models: SFT, reward model, PPO",
		Long: `gochat takes a pre-trained causal LM through the three InstructGPT steps
(supervised fine-tuning, reward model, PPO) and produces a chat model.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(g.Err, g.LogLevel, g.LogFmt)
			if err != nil {
				return usageError{err}
			}
			g.Log = log
			if err := checkFiniteFlags(cmd.Flags()); err != nil {
				return err
			}
			if g.Threads < 0 {
				return usageErrorf("--threads must be >= 0, got %d", g.Threads)
			}
			if g.Threads == 0 {
				g.Threads = runtime.NumCPU()
			}
			if _, err := parseDevice(g.Device); err != nil {
				return err
			}
			if err := resolveGPUMemoryLimit(g, cmd.Flags().Changed("gpu-memory-limit"), os.Getenv); err != nil {
				return err
			}
			switch g.Dist {
			case "", "auto", "mpi", "nccl":
			default:
				return usageErrorf("--dist %q: want auto, mpi or nccl", g.Dist)
			}
			if g.CPUProf != "" {
				f, err := os.Create(g.CPUProf)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				g.stopProf = func() { pprof.StopCPUProfile(); f.Close() }
			}
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.stopProf != nil {
				g.stopProf()
			}
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.LogFmt, "log-format", "auto", "log format: console, json, or auto (console on a terminal, else json)")
	pf.IntVar(&g.Threads, "threads", 0, "CPU threads for kernels (0 = all cores)")
	pf.StringVar(&g.Device, "device", "auto", "compute device: auto (a GPU when one is usable, else the CPU), cpu, cuda or cuda:N")
	pf.StringVar(&g.GPUMemLimit, "gpu-memory-limit", "", gpuMemoryLimitHelp)
	pf.StringVar(&g.Dist, "dist", "auto", "communicator of a multi-rank job (mpirun -np N): auto (NCCL when every rank is on a GPU, else MPI), mpi or nccl")
	pf.StringVar(&g.CPUProf, "cpuprofile", "", "write a Go CPU profile to this file")

	root.AddCommand(
		newVersionCmd(g, nil),
		newGenerateCmd(g, nil),
		newScoreCmd(g, nil),
		newChatCmd(g, nil),
		newTokenizeCmd(g, nil),
		newChatTemplateCmd(g, nil),
		newDataCmd(g, nil),
		newBenchCmd(g),
		newRecipesCmd(g),
		newInitCmd(g, nil),
		newSFTCmd(g, nil),
		newRewardCmd(g, nil),
		newPPOCmd(g, nil),
		newTrainCmd(g, nil),
		newPlotCmd(g, nil),
		newEstimateCmd(g),
		newEnvCmd(g, nil),
	)
	return root
}

// newLogger builds the zerolog logger for --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "auto":
		if isTerminal(w) {
			format = "console"
		} else {
			format = "json"
		}
	case "console", "json":
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want console, json or auto", format)
	}
	var lw io.Writer = w
	if format == "console" {
		lw = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
	}
	return zerolog.New(lw).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// checkFiniteFlags refuses a NaN or infinite value in any floating-point
// flag, naming it: no learning rate, clipping norm or coefficient of
// gochat means anything there, and an Inf recorded in run.json could not
// be resumed.
func checkFiniteFlags(fs *pflag.FlagSet) error {
	var bad error
	fs.VisitAll(func(f *pflag.Flag) {
		if bad != nil || (f.Value.Type() != "float64" && f.Value.Type() != "float32") {
			return
		}
		v, err := strconv.ParseFloat(f.Value.String(), 64)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			bad = usageErrorf("--%s must be a finite number, got %s", f.Name, f.Value.String())
		}
	})
	return bad
}
