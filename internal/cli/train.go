package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/demo"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/recipes"
)

// TrainOptions are the options of `gochat train`.
type TrainOptions struct {
	g             *Globals
	Actor         string
	Reward        string
	Data          []string
	Recipe        string
	OutputDir     string
	Steps         []int
	Force         bool
	Seed          uint64
	DType         string
	SkipPreflight bool
	// offloadOptions, OffloadRef and OffloadReward are passed to the steps
	// (the last two to step 3 only).
	offloadOptions
	OffloadRef, OffloadReward bool
	// Arch is the architecture of the models a recipe's generator writes
	// (the demo's: opt or llama).
	Arch string
	// Revision and DataRevision are passed to every step.
	Revision, DataRevision string
	// ChatTemplate is passed to every step unless the recipe sets the
	// step's and the command line does not (chatSet).
	ChatTemplate string
	chatSet      bool
	recipe       *recipes.Recipe
	// gen is the recipe's generator and genDir its folder (setup).
	gen    generator
	genDir string
	ready  bool // setup has run
	// perGPU makes the memory plan per GPU of a GPU recipe's budget under
	// its ZeRO settings (gochat estimate train --per-gpu).
	perGPU bool
}

// completeFile marks a finished step's output directory.
const completeFile = ".complete"

// noRecipe is the --recipe value that runs the commands' own defaults.
const noRecipe = "none"

func newTrainCmd(g *Globals, runF func(*TrainOptions) error) *cobra.Command {
	o := &TrainOptions{g: g}
	cmd := &cobra.Command{
		Use:   "train --actor MODEL --reward MODEL [--data NAME|PATH...] --output-dir DIR [--recipe NAME|FILE|none]",
		Short: "Run steps 1 (SFT) -> 2 (reward model) -> 3 (PPO) into one output directory",
		Long: `Run the three RLHF steps: step 1 fine-tunes --actor into OUTPUT/actor, step 2
trains a reward model from --reward into OUTPUT/reward, step 3 runs PPO from
both into OUTPUT/ppo. A step whose output is complete is skipped unless
--force; an interrupted step resumes from its checkpoint. --recipe
loads per-step flags from a built-in recipe (gochat recipes) or a YAML file;
--actor, --reward and --data given here override the recipe's. Models are
directories, Hub ids (facebook/opt-1.3b) or DeepSpeed-Chat's short forms
(1.3b, 350m); a Hub id is read from the Hugging Face cache and downloaded
into it when absent. --data defaults to the recipe's, else Dahoas/rm-static.
Without --recipe, the built-in recipe for the actor's and reward model's sizes
that fits this machine is picked (and logged); --recipe none runs the
commands' defaults. --chat-template (auto: the actor's chat template when its
tokenizer has one) goes to every step, so that the three steps render the data
alike. Before step 1 the memory planner checks every step to run
(gochat estimate train shows its tables); a step that would not fit is refused
with the changes that would, unless --skip-preflight.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.offloadOptions.check(cmd.Flags()); err != nil {
				return err
			}
			switch {
			case o.Recipe == "" && o.Actor != "" && o.Reward != "":
				if err := o.pickRecipe(); err != nil {
					return err
				}
			case o.Recipe != "" && o.Recipe != noRecipe:
				r, err := recipes.Load(o.Recipe)
				if err != nil {
					return usageError{err}
				}
				o.recipe = r
			}
			if o.recipe != nil {
				if o.Actor == "" {
					o.Actor = o.recipe.Actor
				}
				if o.Reward == "" {
					o.Reward = o.recipe.Reward
				}
			}
			if o.Actor == "" || o.Reward == "" || (o.OutputDir == "" && !forEstimate(cmd)) {
				return usageErrorf("--actor, --reward (or a --recipe naming them) and --output-dir are required")
			}
			for _, s := range o.Steps {
				if s < 1 || s > 3 {
					return usageErrorf("--step %d: steps are 1, 2 and 3", s)
				}
			}
			o.chatSet = cmd.Flags().Changed("chat-template")
			if runF != nil {
				return runF(o)
			}
			defer o.g.watchSignals()()
			return runTrain(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Actor, "actor", "", "the pre-trained actor: a directory, a Hub id or a short form (1.3b)")
	f.StringVar(&o.Reward, "reward", "", "the pre-trained model the reward model starts from (350m: facebook/opt-350m)")
	f.StringVar(&o.Revision, "revision", "", "Hub revision (branch, tag or commit) of the models named by Hub id (default main)")
	f.StringSliceVar(&o.Data, "data", nil, "datasets for all steps (overrides the recipe's; default Dahoas/rm-static)")
	f.StringVar(&o.DataRevision, "data-revision", "", "Hub revision of the --data datasets named by Hub id (default main)")
	f.StringVar(&o.Recipe, "recipe", "", "a built-in recipe name or a YAML file (default: picked for the models and the machine; none: no recipe)")
	f.StringVar(&o.OutputDir, "output-dir", "", "receives actor/, reward/ and ppo/")
	f.IntSliceVar(&o.Steps, "step", []int{1, 2, 3}, "steps to run")
	f.BoolVar(&o.Force, "force", false, "rerun steps whose output is complete")
	f.Uint64Var(&o.Seed, "seed", 1234, "seed of every step")
	f.StringVar(&o.Arch, "arch", "", "with a generator recipe (demo): the architecture of its from-scratch models, opt or llama (default opt)")
	f.BoolVar(&o.SkipPreflight, "skip-preflight", false, skipPreflightHelp+" (passed to every step)")
	bindDType(f, &o.DType)
	bindChatTemplate(f, &o.ChatTemplate)
	f.Lookup("chat-template").Usage += " (passed to every step)"
	o.offloadOptions.bind(f)
	f.Lookup("offload").Usage += " (passed to every step)"
	f.BoolVar(&o.OffloadRef, "offload-reference-model", false, "step 3: keep the reference model's weights in host memory, each layer's copied to the device just before it runs")
	f.BoolVar(&o.OffloadReward, "offload-reward-model", false, "step 3: keep the reward model's weights in host memory, each layer's copied to the device just before it runs")
	return cmd
}

// stepRun is one step of `gochat train`: its command, name and arguments.
type stepRun struct {
	n    int
	name string // recipe step name and command
	dir  string
	cmd  *cobra.Command
	args []string
}

// stepOpts receives the options a step's command parsed.
type stepOpts struct {
	stage *StageOptions // steps 1 and 2
	ppo   *PPOOptions   // step 3
}

// outDir is the output directory, or a placeholder for `gochat estimate
// train` without one.
func (o *TrainOptions) outDir() string {
	if o.OutputDir == "" {
		return "<output-dir>"
	}
	return o.OutputDir
}

// stepDir is step n's output directory.
func (o *TrainOptions) stepDir(n int) string {
	return filepath.Join(o.outDir(), [...]string{"", "actor", "reward", "ppo"}[n])
}

// newStep returns step n's command with its arguments; parsing them (see
// prepare) fills the returned stepOpts.
func (o *TrainOptions) newStep(n int) (stepRun, *stepOpts) {
	so := &stepOpts{}
	setStage := func(s *StageOptions) error { so.stage = s; return nil }
	switch n {
	case 1:
		return stepRun{n: 1, name: "sft", dir: o.stepDir(1), cmd: newSFTCmd(o.g, setStage),
			args: o.stepArgs("sft", "--model", o.Actor, "--output-dir", o.stepDir(1))}, so
	case 2:
		return stepRun{n: 2, name: "reward", dir: o.stepDir(2), cmd: newRewardCmd(o.g, setStage),
			args: o.stepArgs("reward", "--model", o.Reward, "--output-dir", o.stepDir(2))}, so
	}
	return stepRun{n: 3, name: "ppo", dir: o.stepDir(3), cmd: newPPOCmd(o.g, func(p *PPOOptions) error { so.ppo = p; return nil }),
		args: o.stepArgs("ppo", "--actor", o.stepDir(1), "--critic", o.stepDir(2), "--output-dir", o.stepDir(3))}, so
}

// setup picks the recipe's generator and expands the recipe's {output}
// and {GENERATOR} variables; runTrain runs the generator (the demo's data
// and from-scratch models) once it holds the output directory, `gochat
// estimate train` never.
func (o *TrainOptions) setup() error {
	if o.ready {
		return nil
	}
	o.ready = true
	vars := map[string]string{"output": o.outDir()}
	if o.Arch != "" && (o.recipe == nil || o.recipe.Generator == "") {
		return usageErrorf("--arch chooses the architecture of a generator recipe's models (--recipe demo); with --actor and --reward the models are given")
	}
	if o.recipe != nil && o.recipe.Generator != "" {
		var err error
		name := o.recipe.Generator
		if o.gen, err = newGenerator(name, o.Arch); err != nil {
			return usageErrorf("recipe %s: %v", o.recipe.Source, err)
		}
		o.genDir = filepath.Join(o.outDir(), name)
		vars[name] = o.genDir
	}
	if o.recipe != nil {
		o.recipe.Expand(vars)
	}
	o.Actor, o.Reward = recipes.ExpandString(o.Actor, vars), recipes.ExpandString(o.Reward, vars)
	return nil
}

// runTrain runs the steps in order. Under mpirun every rank runs every
// step data-parallel on one group joined here; rank 0 runs the recipe's
// generator and writes the steps' outputs, and the ranks meet after each
// step so that the next one reads a finished output (the output directory
// must be shared by the ranks' machines, as DeepSpeed-Chat's is).
func runTrain(o *TrainOptions) (err error) {
	dev, err := newDevice(o.g)
	if err != nil {
		return err
	}
	// On a GPU the communicator and every step use this one device (the
	// steps give back what they allocated as they end); on the CPU each
	// step opens its own, as before.
	steps := trainStepDevice(dev)
	defer closeDevice(o.g, dev) // after finish: the communicator uses the device
	ranks, err := joinRanks(o.g, dev)
	if err != nil {
		return err
	}
	defer func() { err = ranks.finish(err) }()
	log := o.g.Log
	start := time.Now()
	// The recipe refers to its generator's folder as {NAME} and to the
	// output directory as {output}; the pre-flight plans the generator's
	// models from its Config before they exist.
	if err := o.setup(); err != nil {
		return err
	}
	if err := o.preflight(dev); err != nil {
		return err
	}
	if ranks.writer() {
		// Nothing is written before the lock: a second train of the same
		// output directory stops here.
		release, err := lockOutput(o.OutputDir)
		if err != nil {
			return err
		}
		defer release()
		// A recipe's generator (the demo's) makes its data and starting
		// models first.
		if o.gen != nil {
			if err := o.gen.Prepare(o.g, o.genDir, o.Seed); err != nil {
				return fmt.Errorf("recipe %s: generator %s: %w", o.recipe.Source, o.recipe.Generator, err)
			}
		}
	}
	if err := ranks.comm.Barrier(); err != nil {
		return fmt.Errorf("wait for rank 0's generator: %w", err)
	}
	times := map[int]time.Duration{}
	for _, n := range []int{1, 2, 3} {
		if !contains(o.Steps, n) {
			continue
		}
		st, so := o.newStep(n)
		// A stop request between steps ends the run here (rank 0's view
		// decides for every rank; one seen by another rank alone stops the
		// next step after its first round).
		if stop, err := ranks.shareFlag(dev, stopRequested(o.g.Stop)); err != nil {
			return err
		} else if stop {
			return fmt.Errorf("%w before step %d (%s); run the same gochat train command again to continue", errStopped, n, st.name)
		}
		// Rank 0's view of the output directory decides for every rank.
		done, err := ranks.shareFlag(dev, o.complete(n))
		if err != nil {
			return err
		}
		if done {
			log.Info().Int("step", st.n).Str("output", st.dir).Msg("complete, skipped (--force reruns it)")
			continue
		}
		_, statErr := os.Stat(filepath.Join(st.dir, runFile))
		resume, err := ranks.shareFlag(dev, statErr == nil && !o.Force)
		if err != nil {
			return err
		}
		args := st.args
		if resume {
			args = append(args, "--resume")
		} else {
			args = append(args, "--overwrite")
		}
		if err := o.prepare(st, args, true); err != nil {
			return err
		}
		releaseMemory() // the previous step's models and buffers, before this step's pre-flight
		t0 := time.Now()
		switch st.n {
		case 1, 2:
			so.stage.ranks, so.stage.dev = ranks, steps
			err = runStage(o.ctx(), so.stage)
		case 3:
			so.ppo.ranks, so.ppo.dev = ranks, steps
			if o.gen != nil {
				so.ppo.check = o.gen.Check
			}
			err = runPPO(o.ctx(), so.ppo)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w%s", st.n, st.name, err, hint(err))
		}
		if err := ranks.comm.Barrier(); err != nil {
			return fmt.Errorf("step %d (%s): wait for rank 0's output: %w", st.n, st.name, err)
		}
		times[st.n] = time.Since(t0)
		if ranks.writer() {
			if err := os.WriteFile(filepath.Join(st.dir, completeFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
				return fmt.Errorf("mark step %d complete: %w", st.n, err)
			}
		}
		log.Info().Int("step", st.n).Str("seconds", times[st.n].Round(time.Second).String()).
			Float64("elapsed_seconds", round(times[st.n].Seconds(), 3)).Msg("step done")
	}
	if !ranks.writer() {
		return nil
	}
	ppoDir := o.stepDir(3)
	if _, err := os.Stat(filepath.Join(ppoDir, completeFile)); o.gen != nil && err != nil {
		log.Info().Msg("report skipped: step 3 has not run")
	} else if o.gen != nil {
		secs := map[int]float64{}
		for n, d := range times {
			secs[n] = d.Seconds()
		}
		if err := o.gen.Report(o.g, o.OutputDir, secs); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	ev := log.Info().Str("total", time.Since(start).Round(time.Second).String())
	for n, d := range times {
		ev = ev.Str(fmt.Sprintf("step%d", n), d.Round(time.Second).String())
	}
	ev.Str("output", o.OutputDir).Msg("train done")
	return nil
}

// complete reports whether step n's output is complete (and not to be
// rerun).
func (o *TrainOptions) complete(n int) bool {
	_, err := os.Stat(filepath.Join(o.stepDir(n), completeFile))
	return err == nil && !o.Force
}

// stepArgs are a step's arguments: the given flag/value pairs, except
// those the recipe sets for the step (the demo's step 3 names its own
// critic and reward model), then --seed and --data.
func (o *TrainOptions) stepArgs(step string, pairs ...string) []string {
	var args []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if o.recipe != nil && o.recipe.Sets(step, strings.TrimPrefix(pairs[i], "--")) {
			continue
		}
		args = append(args, pairs[i], pairs[i+1])
	}
	args = append(args, "--seed", fmt.Sprint(o.Seed))
	if o.SkipPreflight {
		args = append(args, "--skip-preflight")
	}
	if o.DType != "auto" || o.recipe == nil || !o.recipe.Sets(step, "dtype") {
		args = append(args, "--dtype", o.DType)
	}
	if o.Revision != "" {
		args = append(args, "--revision", o.Revision)
	}
	if o.DataRevision != "" {
		args = append(args, "--data-revision", o.DataRevision)
	}
	if o.chatSet || o.recipe == nil || !o.recipe.Sets(step, "chat-template") {
		args = append(args, "--chat-template", o.ChatTemplate)
	}
	for _, d := range o.Data {
		args = append(args, "--data", d)
	}
	if o.Offload {
		args = append(args, "--offload", "--offload-ratio", fmt.Sprint(o.OffloadRatio))
	}
	if step == "ppo" && o.OffloadRef {
		args = append(args, "--offload-reference-model")
	}
	if step == "ppo" && o.OffloadReward {
		args = append(args, "--offload-reward-model")
	}
	return args
}

// generator makes a recipe's task (recipes.Recipe.Generator): its data
// and starting models before step 1, a grader of step 3's sampled answers
// (answer_accuracy), and a report after step 3.
type generator interface {
	// Prepare writes the task into dir.
	Prepare(g *Globals, dir string, seed uint64) error
	// Check grades an answer to a prompt; ok is false when it cannot.
	Check(prompt, answer string) (right, ok bool)
	// Report writes the run's report into out.
	Report(g *Globals, out string, seconds map[int]float64) error
	// Config is the architecture of the models Prepare writes (for the
	// memory planner before they exist).
	Config() (*model.Config, error)
}

// newGenerator returns the named generator.
func newGenerator(name, arch string) (generator, error) {
	switch name {
	case "demo":
		cfg, err := demo.ModelConfigFor(arch)
		if err != nil {
			return nil, usageError{fmt.Errorf("--arch: %w", err)}
		}
		return &demoGenerator{arch: arch, config: cfg}, nil
	}
	return nil, fmt.Errorf("unknown generator %q (want demo)", name)
}

// prepare parses a step's arguments, with the recipe's flags under them;
// logNotHonoured logs the recipe's flags for this step that gochat does
// not implement yet (recipes.Recipe.Later).
func (o *TrainOptions) prepare(st stepRun, args []string, logNotHonoured bool) error {
	c := st.cmd
	c.SetArgs(args)
	c.SilenceErrors, c.SilenceUsage = true, true
	fs := c.Flags()
	if err := fs.Parse(args); err != nil {
		return usageErrorf("step %d: %v", st.n, err)
	}
	if o.recipe != nil {
		later, err := o.recipe.Apply(st.name, fs, func(n string) bool { return fs.Lookup(n) != nil })
		if err != nil {
			return usageError{err}
		}
		if len(later) > 0 && logNotHonoured {
			o.g.Log.Info().Int("step", st.n).Strs("flags", later).Str("recipe", o.recipe.Name).
				Msg("recipe flags recorded for later (ZeRO, offload, multi-GPU): not honoured yet")
		}
	}
	if err := checkFiniteFlags(fs); err != nil {
		return usageErrorf("step %d: %v", st.n, err)
	}
	// RunE validates the options and hands them to the runF captured above.
	return c.RunE(c, nil)
}

func (o *TrainOptions) ctx() context.Context { return context.Background() }

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// hint suggests flags for common failures.
func hint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "cannot allocate") || strings.Contains(s, "out of memory"):
		return " (gochat estimate train with the same flags shows where the memory goes and what would fit)"
	case strings.Contains(s, "non-finite"):
		return " (try a lower learning rate or more warm-up steps in the recipe)"
	case strings.Contains(s, "max_position_embeddings"):
		return " (lower --max-seq-len / --max-prompt-seq-len + --max-answer-seq-len in the recipe)"
	}
	return ""
}
