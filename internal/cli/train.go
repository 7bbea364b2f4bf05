package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/recipes"
)

// TrainOptions are the options of `gochat train`.
type TrainOptions struct {
	g         *Globals
	Actor     string
	Reward    string
	Data      []string
	Recipe    string
	OutputDir string
	Steps     []int
	Force     bool
	Seed      uint64
	DType     string
	// Revision and DataRevision are passed to every step.
	Revision, DataRevision string
	recipe                 *recipes.Recipe
}

// completeFile marks a finished step's output directory.
const completeFile = ".complete"

func newTrainCmd(g *Globals, runF func(*TrainOptions) error) *cobra.Command {
	o := &TrainOptions{g: g}
	cmd := &cobra.Command{
		Use:   "train --actor MODEL --reward MODEL [--data NAME|PATH...] --output-dir DIR [--recipe NAME|FILE]",
		Short: "Run steps 1 (SFT) -> 2 (reward model) -> 3 (PPO) into one output directory",
		Long: `Run the three RLHF steps: step 1 fine-tunes --actor into OUTPUT/actor, step 2
trains a reward model from --reward into OUTPUT/reward, step 3 runs PPO from
both into OUTPUT/ppo. A step whose output is complete is skipped unless
--force; an interrupted step resumes from its checkpoint. --recipe
loads per-step flags from a built-in recipe (gochat recipes) or a YAML file;
--actor, --reward and --data given here override the recipe's. Models are
directories, Hub ids (facebook/opt-1.3b) or DeepSpeed-Chat's short forms
(1.3b, 350m); a Hub id is read from the Hugging Face cache and downloaded
into it when absent. --data defaults to the recipe's, else Dahoas/rm-static.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Recipe != "" {
				r, err := recipes.Load(o.Recipe)
				if err != nil {
					return usageError{err}
				}
				o.recipe = r
				if o.Actor == "" {
					o.Actor = r.Actor
				}
				if o.Reward == "" {
					o.Reward = r.Reward
				}
			}
			if o.Actor == "" || o.Reward == "" || o.OutputDir == "" {
				return usageErrorf("--actor, --reward (or a --recipe naming them) and --output-dir are required")
			}
			for _, s := range o.Steps {
				if s < 1 || s > 3 {
					return usageErrorf("--step %d: steps are 1, 2 and 3", s)
				}
			}
			if runF != nil {
				return runF(o)
			}
			return runTrain(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Actor, "actor", "", "the pre-trained actor: a directory, a Hub id or a short form (1.3b)")
	f.StringVar(&o.Reward, "reward", "", "the pre-trained model the reward model starts from (350m: facebook/opt-350m)")
	f.StringVar(&o.Revision, "revision", "", "Hub revision (branch, tag or commit) of the models named by Hub id (default main)")
	f.StringSliceVar(&o.Data, "data", nil, "datasets for all steps (overrides the recipe's; default Dahoas/rm-static)")
	f.StringVar(&o.DataRevision, "data-revision", "", "Hub revision of the --data datasets named by Hub id (default main)")
	f.StringVar(&o.Recipe, "recipe", "", "a built-in recipe name or a YAML file")
	f.StringVar(&o.OutputDir, "output-dir", "", "receives actor/, reward/ and ppo/")
	f.IntSliceVar(&o.Steps, "step", []int{1, 2, 3}, "steps to run")
	f.BoolVar(&o.Force, "force", false, "rerun steps whose output is complete")
	f.Uint64Var(&o.Seed, "seed", 1234, "seed of every step")
	bindDType(f, &o.DType)
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

func runTrain(o *TrainOptions) error {
	log := o.g.Log
	start := time.Now()
	// A recipe's generator (the demo's) makes its data and starting models
	// first; the recipe refers to its folder as {NAME} and to the output
	// directory as {output}.
	var gen generator
	vars := map[string]string{"output": o.OutputDir}
	if o.recipe != nil && o.recipe.Generator != "" {
		var err error
		name := o.recipe.Generator
		if gen, err = newGenerator(name); err != nil {
			return usageErrorf("recipe %s: %v", o.recipe.Source, err)
		}
		vars[name] = filepath.Join(o.OutputDir, name)
		if err := gen.Prepare(o.g, vars[name], o.Seed); err != nil {
			return fmt.Errorf("recipe %s: generator %s: %w", o.recipe.Source, name, err)
		}
	}
	if o.recipe != nil {
		o.recipe.Expand(vars)
	}
	o.Actor, o.Reward = recipes.ExpandString(o.Actor, vars), recipes.ExpandString(o.Reward, vars)
	actorDir, rewardDir, ppoDir := filepath.Join(o.OutputDir, "actor"), filepath.Join(o.OutputDir, "reward"), filepath.Join(o.OutputDir, "ppo")
	var sftOpts, rwOpts *StageOptions
	var ppoOpts *PPOOptions
	steps := []stepRun{
		{n: 1, name: "sft", dir: actorDir, cmd: newSFTCmd(o.g, func(s *StageOptions) error { sftOpts = s; return nil }),
			args: o.stepArgs("sft", "--model", o.Actor, "--output-dir", actorDir)},
		{n: 2, name: "reward", dir: rewardDir, cmd: newRewardCmd(o.g, func(s *StageOptions) error { rwOpts = s; return nil }),
			args: o.stepArgs("reward", "--model", o.Reward, "--output-dir", rewardDir)},
		{n: 3, name: "ppo", dir: ppoDir, cmd: newPPOCmd(o.g, func(p *PPOOptions) error { ppoOpts = p; return nil }),
			args: o.stepArgs("ppo", "--actor", actorDir, "--critic", rewardDir, "--output-dir", ppoDir)},
	}
	times := map[int]time.Duration{}
	for _, st := range steps {
		if !contains(o.Steps, st.n) {
			continue
		}
		if _, err := os.Stat(filepath.Join(st.dir, completeFile)); err == nil && !o.Force {
			log.Info().Int("step", st.n).Str("output", st.dir).Msg("complete, skipped (--force reruns it)")
			continue
		}
		args := st.args
		resumable := !o.Force
		if _, err := os.Stat(filepath.Join(st.dir, runFile)); err == nil && resumable {
			args = append(args, "--resume")
		} else {
			args = append(args, "--overwrite")
		}
		if err := o.prepare(st, args); err != nil {
			return err
		}
		t0 := time.Now()
		var err error
		switch st.n {
		case 1:
			err = runStage(o.ctx(), sftOpts)
		case 2:
			err = runStage(o.ctx(), rwOpts)
		case 3:
			if gen != nil {
				ppoOpts.check = gen.Check
			}
			err = runPPO(o.ctx(), ppoOpts)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w%s", st.n, st.name, err, hint(err))
		}
		times[st.n] = time.Since(t0)
		if err := os.WriteFile(filepath.Join(st.dir, completeFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
			return fmt.Errorf("mark step %d complete: %w", st.n, err)
		}
		log.Info().Int("step", st.n).Str("seconds", times[st.n].Round(time.Second).String()).Msg("step done")
	}
	if _, err := os.Stat(filepath.Join(ppoDir, completeFile)); gen != nil && err != nil {
		log.Info().Msg("report skipped: step 3 has not run")
	} else if gen != nil {
		secs := map[int]float64{}
		for n, d := range times {
			secs[n] = d.Seconds()
		}
		if err := gen.Report(o.g, o.OutputDir, secs); err != nil {
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
	if o.DType != "auto" || o.recipe == nil || !o.recipe.Sets(step, "dtype") {
		args = append(args, "--dtype", o.DType)
	}
	if o.Revision != "" {
		args = append(args, "--revision", o.Revision)
	}
	if o.DataRevision != "" {
		args = append(args, "--data-revision", o.DataRevision)
	}
	for _, d := range o.Data {
		args = append(args, "--data", d)
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
}

// newGenerator returns the named generator.
func newGenerator(name string) (generator, error) {
	switch name {
	case "demo":
		return &demoGenerator{}, nil
	}
	return nil, fmt.Errorf("unknown generator %q (want demo)", name)
}

// prepare parses a step's arguments, with the recipe's flags under them.
func (o *TrainOptions) prepare(st stepRun, args []string) error {
	c := st.cmd
	c.SetArgs(args)
	c.SilenceErrors, c.SilenceUsage = true, true
	fs := c.Flags()
	if err := fs.Parse(args); err != nil {
		return usageErrorf("step %d: %v", st.n, err)
	}
	if o.recipe != nil {
		if err := o.recipe.Apply(st.name, fs, func(n string) bool { return fs.Lookup(n) != nil }); err != nil {
			return usageError{err}
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
		return " (try a smaller --per-device-train-batch-size, --gradient-checkpointing, or LoRA with --only-optimize-lora)"
	case strings.Contains(s, "non-finite"):
		return " (try a lower learning rate or more warm-up steps in the recipe)"
	case strings.Contains(s, "max_position_embeddings"):
		return " (lower --max-seq-len / --max-prompt-seq-len + --max-answer-seq-len in the recipe)"
	}
	return ""
}
