package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/tokenizer"
	"github.com/gochat-ai/gochat/train"
)

// PPOOptions are the options of `gochat ppo` (DeepSpeed-Chat's step-3 flags
// in kebab case).
type PPOOptions struct {
	g                 *Globals
	Actor, Critic     string
	Reward            string
	Tokenizer         string
	Data              []string
	DataSplit         string
	GenBatch          int
	TrainBatch        int
	GenerationBatches int
	PPOEpochs         int
	Epochs            int
	MaxSteps          int
	MaxPromptLen      int
	MaxAnswerLen      int
	ActorLR, CriticLR float64
	ActorWD, CriticWD float64
	Scheduler         string
	Warmup            int
	Seed              uint64
	ActorLoRADim      int
	CriticLoRADim     int
	LoRAModule        string
	OnlyLoRA          bool
	ActorLoRALR       float64
	CriticLoRALR      float64
	ActorCkpt         bool
	CriticCkpt        bool
	NoActorDropout    bool
	NoCriticDropout   bool
	MaxGradNorm       float64
	EnableEMA         bool
	KeepCache         bool `json:"-"`
	PrintAnswers      bool `json:"-"`
	Sample            model.SampleOptions
	Config            ppo.Config
	OutputDir         string
	Overwrite         bool   `json:"-"`
	Resume            bool   `json:"-"`
	SaveInterval      int    `json:"-"`
	DataCache         string `json:"-"`
	EndText           string
	UnsupData         string
	UnsupColumn       string
	split             data.Split
	// check grades an answer to a prompt (the demo's exact checker); with
	// it, each step logs answer_accuracy, the fraction of sampled answers
	// that are right. ok is false for a prompt it cannot grade.
	check func(prompt, answer string) (right, ok bool)
}

func newPPOCmd(g *Globals, runF func(*PPOOptions) error) *cobra.Command {
	o := &PPOOptions{g: g, Config: ppo.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "ppo --actor SFT_DIR --critic REWARD_DIR --data NAME|PATH... --output-dir DIR",
		Short: "Step 3: PPO with the hybrid engine (actor, frozen reference, critic, frozen reward model)",
		Long: `Step 3 of RLHF: the actor (from step 1) generates answers to the phase-3
prompts through the hybrid engine; the frozen reference (a copy of the actor),
the critic (from step 2, trained) and the frozen reward model (--reward, default
the critic's starting point) score them; then PPO updates the actor and the
critic (KL-penalised rewards, GAE, clipped losses), optionally with an actor
EMA, and with --unsupervised-dataset a mixture step on the LM loss. The output
directory receives actor/, critic/ (and actor_ema/) as Hugging Face
directories, metrics.jsonl, training curves and timing.json; during the run a
checkpoint/ (every --save-interval generation batches, else each epoch) lets
--resume continue a killed run to bit-identical results.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Actor == "" || o.Critic == "":
				return usageErrorf("--actor and --critic are required")
			case len(o.Data) == 0:
				return usageErrorf("--data is required")
			case o.OutputDir == "":
				return usageErrorf("--output-dir is required")
			case o.GenBatch < 1 || o.TrainBatch < 1 || o.GenerationBatches < 1 || o.PPOEpochs < 1:
				return usageErrorf("batch sizes, --generation-batches and --ppo-epochs must be >= 1")
			case o.MaxPromptLen < 1 || o.MaxAnswerLen < 2:
				return usageErrorf("--max-prompt-seq-len must be >= 1 and --max-answer-seq-len >= 2")
			case o.OnlyLoRA && o.ActorLoRADim == 0 && o.CriticLoRADim == 0:
				return usageErrorf("--only-optimize-lora needs --actor-lora-dim or --critic-lora-dim")
			case o.SaveInterval < 0:
				return usageErrorf("--save-interval must be >= 0")
			case o.Resume && o.Overwrite:
				return usageErrorf("--resume and --overwrite exclude each other")
			}
			f := cmd.Flags()
			o.Sample.Greedy = f.Changed("greedy")
			if err := o.Sample.Validate(); err != nil {
				return usageError{err}
			}
			o.Config.ActorLR, o.Config.CriticLR = o.ActorLR, o.CriticLR
			if err := o.Config.Validate(); err != nil {
				return usageError{err}
			}
			sp, err := checkScheduleAndSplit(o.Scheduler, o.DataSplit)
			if err != nil {
				return err
			}
			o.split = sp
			if o.Reward == "" {
				o.Reward = o.Critic
			}
			if o.Tokenizer == "" {
				o.Tokenizer = o.Actor
			}
			if runF != nil {
				return runF(o)
			}
			return runPPO(context.Background(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Actor, "actor", "", "step-1 model directory (the actor and the frozen reference)")
	f.StringVar(&o.Critic, "critic", "", "step-2 model directory (the critic's starting point)")
	f.StringVar(&o.Reward, "reward", "", "reward model directory (default: --critic)")
	f.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer directory (default: --actor)")
	f.StringSliceVar(&o.Data, "data", nil, "prompt datasets (their phase-3 slice)")
	f.StringVar(&o.DataSplit, "data-split", "2,4,4", "proportions of the rows for steps 1, 2 and 3")
	f.IntVar(&o.GenBatch, "per-device-generation-batch-size", 16, "prompts per generation batch")
	f.IntVar(&o.TrainBatch, "per-device-training-batch-size", 16, "experience rows per PPO micro-batch")
	f.IntVar(&o.GenerationBatches, "generation-batches", 1, "generation batches collected before training on them")
	f.IntVar(&o.PPOEpochs, "ppo-epochs", 1, "passes of PPO over each collected experience")
	f.IntVar(&o.Epochs, "num-train-epochs", 1, "epochs over the prompts")
	f.IntVar(&o.MaxSteps, "max-steps", 0, "stop after this many generation batches (0: epochs decide)")
	f.IntVar(&o.MaxPromptLen, "max-prompt-seq-len", 256, "prompt length (longer prompts are dropped)")
	f.IntVar(&o.MaxAnswerLen, "max-answer-seq-len", 256, "most generated tokens per answer")
	f.Float64Var(&o.ActorLR, "actor-learning-rate", 9.65e-6, "actor learning rate")
	f.Float64Var(&o.CriticLR, "critic-learning-rate", 5e-6, "critic learning rate")
	f.Float64Var(&o.ActorWD, "actor-weight-decay", 0, "actor weight decay")
	f.Float64Var(&o.CriticWD, "critic-weight-decay", 0, "critic weight decay")
	f.StringVar(&o.Scheduler, "lr-scheduler-type", "cosine", "learning-rate schedule of both models")
	f.IntVar(&o.Warmup, "num-warmup-steps", 100, "warm-up steps")
	f.Uint64Var(&o.Seed, "seed", 1234, "seed of the data, sampling and dropout")
	f.IntVar(&o.ActorLoRADim, "actor-lora-dim", 0, "actor LoRA rank (0: none)")
	f.IntVar(&o.CriticLoRADim, "critic-lora-dim", 0, "critic LoRA rank (0: none)")
	f.StringVar(&o.LoRAModule, "lora-module-name", "decoder.layers.", "LoRA applies to linear layers whose name contains this")
	f.BoolVar(&o.OnlyLoRA, "only-optimize-lora", false, "train only the LoRA weights")
	f.Float64Var(&o.ActorLoRALR, "actor-lora-learning-rate", 5e-4, "actor LoRA learning rate")
	f.Float64Var(&o.CriticLoRALR, "critic-lora-learning-rate", 5e-4, "critic LoRA learning rate")
	f.BoolVar(&o.ActorCkpt, "actor-gradient-checkpointing", false, "recompute the actor's layers in the backward pass")
	f.BoolVar(&o.CriticCkpt, "critic-gradient-checkpointing", false, "recompute the critic's layers in the backward pass")
	f.BoolVar(&o.NoActorDropout, "disable-actor-dropout", false, "no dropout in the actor")
	f.BoolVar(&o.NoCriticDropout, "disable-critic-dropout", false, "no dropout in the critic")
	f.Float64Var(&o.MaxGradNorm, "max-grad-norm", 1.0, "global gradient-norm clipping (0: off)")
	f.BoolVar(&o.EnableEMA, "enable-ema", false, "keep an exponential moving average of the actor (saved as actor_ema/)")
	f.BoolVar(&o.KeepCache, "keep-inference-cache", false, "keep the inference workspace and KV cache between generations")
	f.BoolVar(&o.PrintAnswers, "print-answers", false, "log a sample prompt and answer of each generation batch")
	f.BoolVar(&o.Sample.Greedy, "greedy", false, "greedy generation (default: sampling)")
	f.Float64Var(&o.Sample.Temperature, "temperature", 1, "sampling temperature")
	f.IntVar(&o.Sample.TopK, "top-k", 0, "sample from the K most likely tokens (0: all)")
	f.Float64Var(&o.Sample.TopP, "top-p", 1, "nucleus sampling mass")
	f.Float64Var(&o.Config.KLCtl, "kl-ctl", o.Config.KLCtl, "KL penalty coefficient")
	f.Float64Var(&o.Config.ClipRewardValue, "clip-reward-value", o.Config.ClipRewardValue, "reward-score clipping")
	f.Float64Var(&o.Config.ClipRange, "cliprange", o.Config.ClipRange, "actor ratio clipping ε")
	f.Float64Var(&o.Config.ClipRangeValue, "cliprange-value", o.Config.ClipRangeValue, "critic value clipping")
	f.Float64Var(&o.Config.Gamma, "gamma", o.Config.Gamma, "discount γ")
	f.Float64Var(&o.Config.Lambda, "lam", o.Config.Lambda, "GAE λ")
	f.Float64Var(&o.Config.EMABeta, "ema-beta", o.Config.EMABeta, "actor EMA β")
	f.BoolVar(&o.Config.WhitenAdvantages, "whiten-advantages", false, "normalise advantages over each batch")
	f.BoolVar(&o.Config.ScoreScaling, "use-score-scaling", false, "divide reward scores by their running standard deviation before clipping")
	f.BoolVar(&o.Config.ScoreNorm, "use-score-norm", false, "with --use-score-scaling, also subtract the running mean")
	f.StringVar(&o.OutputDir, "output-dir", "", "where actor/, critic/, actor_ema/ and metrics go")
	f.BoolVar(&o.Overwrite, "overwrite", false, "replace what --output-dir holds")
	f.BoolVar(&o.Resume, "resume", false, "continue the run in --output-dir from its checkpoint")
	f.IntVar(&o.SaveInterval, "save-interval", 0, "checkpoint every N generation batches (0: at the end of each epoch over the prompts)")
	f.StringVar(&o.UnsupData, "unsupervised-dataset", "", "plain-text dataset for mixture training (its train split; e.g. wikitext)")
	f.StringVar(&o.UnsupColumn, "unsupervised-dataset-column", "", "text column of --unsupervised-dataset (default: \"text\" or its only string column)")
	f.Float64Var(&o.Config.UnsupCoef, "unsup-coef", o.Config.UnsupCoef, "weight of the unsupervised LM loss (with --unsupervised-dataset)")
	f.StringVar(&o.DataCache, "data-cache", "", "tokenized-data cache folder (\"off\" disables)")
	f.StringVar(&o.EndText, "reward-end-text", data.DefaultEndText, "text appended to answers before the reward model scores them, as in step 2 (\"\" for none)")
	return cmd
}

// ppoCheckpoint is the record of a step-3 checkpoint (state.json).
type ppoCheckpoint struct {
	Fingerprint string           `json:"fingerprint"`
	Batches     int              `json:"generation_batches_done"`
	Steps       int              `json:"ppo_steps_done"`
	Trainer     ppo.TrainerState `json:"trainer"`
}

// fingerprint identifies a step-3 run by the settings that change its
// result.
func (o *PPOOptions) fingerprint() string { return fingerprintOf(o) }

func runPPO(ctx context.Context, o *PPOOptions) error {
	log := o.g.Log
	if _, err := os.Stat(filepath.Join(o.OutputDir, runFile)); err != nil && !o.Overwrite {
		// A step-3 result without a run record (written by hand, or by an
		// older gochat) is not replaced silently.
		if _, err := os.Stat(filepath.Join(o.OutputDir, "actor", "config.json")); err == nil {
			return usageErrorf("--output-dir %s already holds a step-3 result; pass --overwrite to replace it", o.OutputDir)
		}
	}
	var err error
	if o.Resume, err = prepareRunDir(o.g, o.OutputDir, o, o.Resume, o.Overwrite); err != nil {
		return err
	}
	dev, err := newCPU(o.g)
	if err != nil {
		return err
	}
	load := func(dir, vh string) (*model.Model, error) {
		return model.Load(dev, dir, model.LoadOptions{ValueHead: vh})
	}
	actor, err := load(o.Actor, "no")
	if err != nil {
		return err
	}
	ref, err := load(o.Actor, "no")
	if err != nil {
		return err
	}
	critic, err := load(o.Critic, "yes")
	if err != nil {
		return err
	}
	rm, err := load(o.Reward, "yes")
	if err != nil {
		return err
	}
	if o.MaxPromptLen+o.MaxAnswerLen > actor.Config.MaxPositions {
		return usageErrorf("--max-prompt-seq-len + --max-answer-seq-len = %d exceeds the actor's max_position_embeddings %d",
			o.MaxPromptLen+o.MaxAnswerLen, actor.Config.MaxPositions)
	}
	var actorLoRA, criticLoRA *lora.LoRA
	if o.ActorLoRADim > 0 {
		if actorLoRA, err = lora.New(actor, lora.Config{Dim: o.ActorLoRADim, ModuleName: o.LoRAModule}, o.Seed); err != nil {
			return usageError{err}
		}
	}
	if o.CriticLoRADim > 0 {
		if criticLoRA, err = lora.New(critic, lora.Config{Dim: o.CriticLoRADim, ModuleName: o.LoRAModule}, o.Seed+1); err != nil {
			return usageError{err}
		}
		critic.SetAdapter(criticLoRA)
	}
	prompts, tok, err := o.loadPrompts(actor)
	if err != nil {
		return err
	}
	unsup, err := o.loadUnsupervised()
	if err != nil {
		return err
	}
	sample := o.Sample
	sample.Seed = o.Seed
	eng, err := hybridengine.New(actor, actorLoRA, hybridengine.Options{MaxAnswerLen: o.MaxAnswerLen, Sample: sample,
		KeepInferenceCache: o.KeepCache, GradientCheckpointing: o.ActorCkpt})
	if err != nil {
		return err
	}
	batchesPerEpoch := (len(prompts.Examples) + o.GenBatch - 1) / o.GenBatch
	total := o.Epochs * batchesPerEpoch
	if o.MaxSteps > 0 {
		total = o.MaxSteps
	}
	trainSteps := total * o.PPOEpochs * ((o.GenBatch + o.TrainBatch - 1) / o.TrainBatch)
	actorSched, err := optim.NewSchedule(o.Scheduler, o.Warmup, trainSteps)
	if err != nil {
		return usageError{err}
	}
	criticSched, _ := optim.NewSchedule(o.Scheduler, o.Warmup, trainSteps)
	tr, err := ppo.NewTrainer(o.Config, ppo.Options{ActorWeightDecay: o.ActorWD, CriticWeightDecay: o.CriticWD,
		ActorLoRALR: o.ActorLoRALR, CriticLoRALR: o.CriticLoRALR, OnlyOptimizeLoRA: o.OnlyLoRA,
		ActorSchedule: actorSched, CriticSchedule: criticSched, MaxGradNorm: o.MaxGradNorm,
		ActorDropout: !o.NoActorDropout, CriticDropout: !o.NoCriticDropout, CriticCheckpointing: o.CriticCkpt,
		EnableEMA: o.EnableEMA, Seed: o.Seed, RewardSuffix: rewardSuffix(tok, o.EndText)},
		ppo.Models{Actor: eng, ActorLoRA: actorLoRA, Ref: ref, Critic: critic, CriticLoRA: criticLoRA, Reward: rm})
	if err != nil {
		return err
	}
	// Resume: the checkpoint restores the trained state; the prompt order,
	// sampling and dropout are functions of the seed and the position, so
	// the run continues exactly as the interrupted one would have.
	startBatch, step := 0, 0
	if o.Resume && train.HasCheckpoint(o.OutputDir) {
		var ck ppoCheckpoint
		if err := train.ReadRecord(o.OutputDir, &ck); err != nil {
			return err
		}
		if ck.Fingerprint != o.fingerprint() {
			return usageErrorf("checkpoint in %s belongs to a different run; pass --overwrite to start afresh", o.OutputDir)
		}
		if err := train.LoadState(dev, o.OutputDir, tr.StateBuffers()); err != nil {
			return err
		}
		tr.Restore(ck.Trainer)
		startBatch, step = ck.Batches, ck.Steps
		log.Info().Int("generation_batch", startBatch).Int("step", step).Msg("resumed from checkpoint")
	}
	metricsPath := filepath.Join(o.OutputDir, train.MetricsFile)
	mf, err := train.OpenMetrics(o.OutputDir, step)
	if err != nil {
		return err
	}
	defer mf.Close()
	col := data.Collator{T: o.MaxPromptLen, PAD: int32(actor.Config.PadTokenID)}
	log.Info().Int("prompts", len(prompts.Examples)).Int("generation_batches", total).Int("actor_params", actor.NumParams()).
		Str("device", dev.Name()).Msg("step 3")
	start := time.Now()
	var tm ppoTiming
	var pending []*ppo.Batch
	checkpoint := func(done int) error {
		ck := ppoCheckpoint{Fingerprint: o.fingerprint(), Batches: done, Steps: step, Trainer: tr.State()}
		if err := mf.Sync(); err != nil {
			return fmt.Errorf("write metrics: %w", err)
		}
		if err := train.SaveState(dev, o.OutputDir, tr.StateBuffers(), ck); err != nil {
			return err
		}
		log.Debug().Int("generation_batch", done).Int("step", step).Msg("checkpoint")
		return nil
	}
	interval, lastCkpt := o.SaveInterval, startBatch
	if interval == 0 {
		interval = batchesPerEpoch
	}
	for gb := startBatch; gb < total; gb++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		epoch, k := gb/batchesPerEpoch, gb%batchesPerEpoch
		perm := rand.New(rand.NewPCG(o.Seed, uint64(epoch)+1)).Perm(len(prompts.Examples))
		idx := perm[k*o.GenBatch : min((k+1)*o.GenBatch, len(perm))]
		exs := make([]data.Example, len(idx))
		rows := make([]uint64, len(idx))
		for i, j := range idx {
			exs[i], rows[i] = prompts.Examples[j], uint64(gb*o.GenBatch+i)
		}
		pb, err := col.Prompts(exs)
		if err != nil {
			return err
		}
		bt, err := tr.GenerateExperience(hybridengine.Prompts{B: pb.B, T: pb.T, IDs: pb.IDs, Mask: pb.Mask, Rows: rows})
		if errors.Is(err, ppo.ErrNoAnswers) {
			log.Warn().Int("batch", gb).Msg("every answer had at most one token; batch skipped")
			continue
		}
		if err != nil {
			return err
		}
		if o.PrintAnswers && tok != nil && bt.Rollout != nil {
			for i, r := range bt.Kept[:min(len(bt.Kept), 4)] {
				p, _ := tok.Decode(exs[r].IDs, true)
				a, _ := tok.Decode(bt.Rollout.Answer(r), true)
				log.Info().Str("prompt", p).Str("answer", a).Float32("score", bt.RawScores[i]).Msg("sample")
			}
		}
		tm.GenerationSeconds += bt.Gen.GenerateSeconds
		tm.ExperienceSeconds += bt.Gen.ForwardSeconds
		tm.GeneratedTokens += bt.Gen.Tokens
		accuracy := math.NaN()
		if o.check != nil && tok != nil {
			accuracy = o.answerAccuracy(tok, exs, bt)
		}
		pending = append(pending, bt)
		if len(pending) < o.GenerationBatches && gb < total-1 {
			continue
		}
		for range o.PPOEpochs {
			for _, b := range pending {
				n := len(b.Kept)
				for lo := 0; lo < n; lo += o.TrainBatch {
					var ub *ppo.UnsupBatch
					if unsup != nil {
						if ub, err = unsup.batch(step, o.TrainBatch); err != nil {
							return err
						}
					}
					st, err := tr.TrainStep(b.Slice(lo, min(lo+o.TrainBatch, n)), ub)
					if err != nil {
						return fmt.Errorf("PPO step %d: %w", step+1, err)
					}
					step++
					tm.TrainingSeconds += st.TrainSeconds
					tm.TrainingTokens += st.TrainSeconds * st.TrainTokensPerSecond
					if err := checkFinite(st, step); err != nil {
						return err
					}
					rec := map[string]any{"step": step, "epoch": epoch, "actor_loss": st.ActorLoss, "critic_loss": st.CriticLoss,
						"reward_score": st.RewardScore, "reward_score_ema": st.RewardScoreEMA, "kl": st.KL, "answer_len": st.AnswerLen,
						"actor_clipfrac": st.ActorClipFrac, "critic_clipfrac": st.CriticClipFrac,
						"generation_seconds": st.GenerateSeconds, "generation_tokens_per_sec": st.GenerateTokensPerSecond,
						"training_seconds": st.TrainSeconds, "training_tokens_per_sec": st.TrainTokensPerSecond}
					ev := log.Info().Int("step", step).Float64("reward", st.RewardScore).Float64("kl", st.KL).
						Float64("actor_loss", st.ActorLoss).Float64("critic_loss", st.CriticLoss).Float64("answer_len", st.AnswerLen)
					if !math.IsNaN(accuracy) {
						rec["answer_accuracy"] = accuracy
					}
					if ub != nil {
						rec["unsup_loss"] = st.UnsupLoss
						ev = ev.Float64("unsup_loss", st.UnsupLoss)
					}
					if err := mf.Write(rec); err != nil {
						return err
					}
					ev.Msg("ppo")
				}
			}
		}
		pending = pending[:0]
		// Checkpoints fall after a training round, once the interval has
		// passed since the last one.
		if done := gb + 1; done < total && done-lastCkpt >= interval {
			if err := checkpoint(done); err != nil {
				return err
			}
			lastCkpt = done
		}
	}
	if err := o.savePPO(eng, actorLoRA, critic, criticLoRA, tr); err != nil {
		return err
	}
	// The outputs are complete: the checkpoint (the size of two models and
	// their optimizers) has served its purpose.
	if err := os.RemoveAll(filepath.Join(o.OutputDir, train.CheckpointDir)); err != nil {
		log.Warn().Err(err).Msg("checkpoint not removed")
	}
	if _, err := train.PlotMetrics(metricsPath, o.OutputDir); err != nil {
		log.Warn().Err(err).Msg("training curves not drawn")
	}
	tm.TotalSeconds = time.Since(start).Seconds()
	if tm.GenerationSeconds > 0 {
		tm.GenerationTokensPerSec = float64(tm.GeneratedTokens) / tm.GenerationSeconds
	}
	if tm.TrainingSeconds > 0 {
		tm.TrainingTokensPerSec = tm.TrainingTokens / tm.TrainingSeconds
	}
	b, _ := json.MarshalIndent(tm, "", "  ")
	if err := writeFileAtomic(filepath.Join(o.OutputDir, timingFile), append(b, '\n')); err != nil {
		return err
	}
	log.Info().Int("steps", step).Str("elapsed", time.Since(start).Round(time.Second).String()).
		Float64("generation_seconds", tm.GenerationSeconds).Float64("experience_seconds", tm.ExperienceSeconds).
		Float64("training_seconds", tm.TrainingSeconds).Float64("generation_tokens_per_sec", tm.GenerationTokensPerSec).
		Float64("training_tokens_per_sec", tm.TrainingTokensPerSec).Str("output", o.OutputDir).Msg("done")
	return nil
}

// timingFile is where step 3 writes ppoTiming.
const timingFile = "timing.json"

// ppoTiming splits a step-3 run's time (this process's part of it, after a
// resume): decoding (the hybrid engine in Generate mode, switches
// included), the four gradient-free forwards that score the experience,
// and the PPO updates (actor, critic and unsupervised passes).
type ppoTiming struct {
	TotalSeconds           float64 `json:"total_seconds"`
	GenerationSeconds      float64 `json:"generation_seconds"`
	ExperienceSeconds      float64 `json:"experience_seconds"`
	TrainingSeconds        float64 `json:"training_seconds"`
	GeneratedTokens        int     `json:"generated_tokens"`
	GenerationTokensPerSec float64 `json:"generation_tokens_per_sec"`
	TrainingTokens         float64 `json:"training_tokens"`
	TrainingTokensPerSec   float64 `json:"training_tokens_per_sec"`
}

// answerAccuracy grades the sampled answers of a generation batch with
// o.check: the fraction right among the gradable ones (NaN if none).
func (o *PPOOptions) answerAccuracy(tok *tokenizer.Tokenizer, exs []data.Example, bt *ppo.Batch) float64 {
	right, n := 0, 0
	eos, _ := tok.EOS()
	for _, r := range bt.Kept {
		ans := bt.Rollout.Answer(r)
		if k := len(ans); k > 0 && ans[k-1] == eos {
			ans = ans[:k-1]
		}
		p, err1 := tok.Decode(exs[r].IDs, true)
		a, err2 := tok.Decode(ans, true)
		if err1 != nil || err2 != nil {
			continue
		}
		if ok, gradable := o.check(p, a); gradable {
			n++
			if ok {
				right++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(right) / float64(n)
}

// checkFinite stops step 3 on a non-finite loss or reward.
func checkFinite(st ppo.StepStats, step int) error {
	for _, x := range []struct {
		name string
		v    float64
	}{{"actor loss", st.ActorLoss}, {"critic loss", st.CriticLoss}, {"reward score", st.RewardScore}, {"unsupervised loss", st.UnsupLoss}} {
		if math.IsNaN(x.v) || math.IsInf(x.v, 0) {
			return fmt.Errorf("PPO step %d: non-finite %s (%v); the last checkpoint is intact (--resume continues from it)", step, x.name, x.v)
		}
	}
	return nil
}

// unsupData is the unsupervised dataset of mixture training, batched.
type unsupData struct {
	set  *data.Set
	col  data.Collator
	seed uint64
}

// batch returns the unsupervised micro-batch of PPO step `step` (0-based):
// blocks [step·n, (step+1)·n) of the endless sequence of seeded
// permutations of the blocks, so the position follows from the step alone
// (and a resumed run picks up where it stopped).
func (u *unsupData) batch(step, n int) (*ppo.UnsupBatch, error) {
	N := len(u.set.Examples)
	exs := make([]data.Example, n)
	var perm []int
	pass := -1
	for i := range n {
		g := step*n + i
		if p := g / N; p != pass {
			pass = p
			perm = rand.New(rand.NewPCG(u.seed, uint64(p)+0x5eed)).Perm(N)
		}
		exs[i] = u.set.Examples[perm[g%N]]
	}
	b, err := u.col.Blocks(exs)
	if err != nil {
		return nil, err
	}
	return &ppo.UnsupBatch{B: b.B, T: b.T, IDs: b.IDs, Mask: b.Mask, Targets: model.ShiftLabels(b.Labels, b.B, b.T)}, nil
}

// loadUnsupervised loads --unsupervised-dataset (nil without one).
func (o *PPOOptions) loadUnsupervised() (*unsupData, error) {
	if o.UnsupData == "" {
		return nil, nil
	}
	dt, eos, pad, fp, err := loadDataTokenizer(o.Tokenizer, o.g.Threads)
	if err != nil {
		return nil, err
	}
	ds, err := data.Resolve(o.UnsupData, data.ResolveOptions{})
	if err != nil {
		return nil, fmt.Errorf("--unsupervised-dataset: %w", err)
	}
	set, err := data.LoadUnsupervised(ds, o.UnsupColumn, data.Options{MaxPromptLen: o.MaxPromptLen, MaxAnswerLen: o.MaxAnswerLen,
		EOS: eos, PAD: pad, Tokenizer: dt, TokenizerID: fp, CacheDir: dataCacheDir(o.DataCache)})
	if err != nil {
		return nil, fmt.Errorf("--unsupervised-dataset %s: %w", o.UnsupData, err)
	}
	if len(set.Examples) == 0 {
		return nil, usageErrorf("--unsupervised-dataset %s has no text in its train split", o.UnsupData)
	}
	o.g.Log.Info().Int("blocks", len(set.Examples)).Str("dataset", o.UnsupData).Float64("unsup_coef", o.Config.UnsupCoef).Msg("mixture training")
	return &unsupData{set: set, col: data.Collator{T: o.MaxPromptLen + o.MaxAnswerLen, PAD: pad}, seed: o.Seed}, nil
}

// loadPrompts builds the phase-3 prompts.
func (o *PPOOptions) loadPrompts(m *model.Model) (*data.Set, *tokenizer.Tokenizer, error) {
	dt, eos, pad, fp, err := loadDataTokenizer(o.Tokenizer, o.g.Threads)
	if err != nil {
		return nil, nil, err
	}
	dss, err := resolveData(o.Data, data.ResolveOptions{})
	if err != nil {
		return nil, nil, err
	}
	cache := dataCacheDir(o.DataCache)
	set, _, err := data.Load(dss, nil, data.PhasePPO, data.Options{Split: o.split, Seed: uint32(o.Seed),
		MaxPromptLen: o.MaxPromptLen, MaxAnswerLen: o.MaxAnswerLen, EOS: eos, PAD: pad, Tokenizer: dt,
		TokenizerID: fp, CacheDir: cache})
	if err != nil {
		return nil, nil, err
	}
	if len(set.Examples) == 0 {
		return nil, nil, usageErrorf("no step-3 prompts after --data-split %s and --max-prompt-seq-len %d", o.DataSplit, o.MaxPromptLen)
	}
	return set, dt.t, nil
}

// savePPO writes actor/ (LoRA fused), critic/ (with v_head) and actor_ema/.
func (o *PPOOptions) savePPO(eng *hybridengine.Engine, actorLoRA *lora.LoRA, critic *model.Model, criticLoRA *lora.LoRA, tr *ppo.Trainer) error {
	actor, err := eng.Model()
	if err != nil {
		return err
	}
	save := func(m *model.Model, lo *lora.LoRA, loraParams kernels.Buffer, dir string) error {
		return saveModelDir(m, lo, loraParams, dir, o.Tokenizer)
	}
	if err := save(actor, actorLoRA, nil, filepath.Join(o.OutputDir, "actor")); err != nil {
		return err
	}
	if err := save(critic, criticLoRA, nil, filepath.Join(o.OutputDir, "critic")); err != nil {
		return err
	}
	if emaFlat, emaLoRA := tr.EMA(); emaFlat != nil {
		if err := save(actor.WithParams(emaFlat), actorLoRA, emaLoRA, filepath.Join(o.OutputDir, "actor_ema")); err != nil {
			return err
		}
	}
	return nil
}

// rewardSuffix is the tokenized end text the reward model saw in step 2.
func rewardSuffix(tok *tokenizer.Tokenizer, text string) []int32 {
	if text == "" || tok == nil {
		return nil
	}
	return tok.Encode(text, false)
}
