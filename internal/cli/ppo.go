package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/tokenizer"
	"github.com/gochat-ai/gochat/train"
	"github.com/gochat-ai/gochat/zero"
)

// PPOOptions are the options of `gochat ppo` (DeepSpeed-Chat's step-3 flags
// in kebab case).
type PPOOptions struct {
	g                 *Globals
	ranks             *group         // the job's ranks when gochat train runs the step (stepRanks)
	dev               kernels.Device // gochat train's device for its steps (trainStepDevice); nil: the step opens --device's
	Actor, Critic     string
	Reward            string
	Tokenizer         string
	Data              []string
	DataSplit         string
	GenBatch          int
	TrainBatch        int
	GenerationBatches int
	GradAccum         int `json:"-"` // in Streams
	// Streams is ranks × GradAccum: the micro-batches of one PPO
	// iteration. It is what the run's result depends on, so a checkpoint
	// resumes on another number of ranks with the same product.
	Streams               int `json:"streams"`
	ActorZeRO, CriticZeRO int `json:"-"` // change only the summation order
	offloadOptions
	// OffloadRef and OffloadReward keep the frozen reference and reward
	// models' weights in host memory, each decoder layer's brought to the
	// device just before it runs (DeepSpeed-Chat's
	// --offload_reference_model and --offload_reward_model).
	OffloadRef        bool `json:"-"`
	OffloadReward     bool `json:"-"`
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
	ActorDropout      bool
	CriticDropout     bool
	NoActorDropout    bool `json:"-"`
	NoCriticDropout   bool `json:"-"`
	MaxGradNorm       float64
	DType             string `json:"dtype"`
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
	SkipPreflight     bool   `json:"-"`
	EndText           string
	UnsupData         string
	UnsupColumn       string
	Revision          string `json:",omitempty"`
	DataRevision      string `json:",omitempty"`
	// ChatTemplate is --chat-template; ChatDigest the resolved template's
	// digest, "" for DeepSpeed-Chat's text (fingerprints of runs without a
	// template are those from before the flag).
	ChatTemplate string `json:"-"`
	ChatDigest   string `json:",omitempty"`
	split        data.Split
	// The local directories of Actor, Critic, Reward and Tokenizer (Hub
	// snapshots for Hub ids).
	actorDir, criticDir, rewardDir, tokDir string
	// chat is the resolved --chat-template (nil: DeepSpeed-Chat's text).
	chat *data.ChatFormat
	// check grades an answer to a prompt (a recipe generator's checker);
	// with it, each round logs answer_accuracy, the fraction of sampled
	// answers that are right. ok is false for a prompt it cannot grade.
	check func(prompt, answer string) (right, ok bool)
}

func newPPOCmd(g *Globals, runF func(*PPOOptions) error) *cobra.Command {
	o := &PPOOptions{g: g, Config: ppo.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "ppo --actor SFT_DIR --critic REWARD_DIR [--reward DIR|HUB_ID] --data NAME|PATH... --output-dir DIR",
		Short: "Step 3: PPO with the hybrid engine (actor, frozen reference, critic, frozen reward model)",
		Long: `Step 3 of RLHF: the actor (from step 1) generates answers to the phase-3
prompts through the hybrid engine; the frozen reference (a copy of the actor),
the critic (from step 2, trained) and the frozen reward model (--reward, default
the critic's starting point; it must have a trained value head) score them; then PPO updates the actor and the
critic (KL-penalised rewards, GAE, clipped losses), optionally with an actor
EMA, and with --unsupervised-dataset a mixture step on the LM loss. Dropout is
off in the training passes unless --actor-dropout / --critic-dropout (the old
log-probs come from dropout-free passes; TRL and OpenRLHF do the same). The output
directory receives actor/, critic/ (and actor_ema/) as Hugging Face
directories, metrics.jsonl, training curves and timing.json; during the run a
checkpoint/ (every --save-interval generation batches, else each epoch) lets
--resume continue a killed run to bit-identical results.

With a chat template (--chat-template auto, the default, when the tokenizer
has one; or FILE) the prompts are the conversations rendered with the
generation prompt, generation stops at the tokenizer's EOS ids and the
template's end-of-turn token (<|im_end|>, <|eot_id|>), and the reward model
scores the conversation with the answer as the last assistant message,
rendered as step 2 rendered its pairs (--reward-end-text is not used).
Without one the prompts are DeepSpeed-Chat's "\n\nHuman: ...\n\nAssistant:"
text, as before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			estimate := forEstimate(cmd)
			switch {
			case o.Actor == "" || o.Critic == "":
				return usageErrorf("--actor and --critic are required")
			case len(o.Data) == 0 && !estimate:
				return usageErrorf("--data is empty")
			case o.OutputDir == "" && !estimate:
				return usageErrorf("--output-dir is required")
			case o.OnlyLoRA && o.ActorLoRADim == 0 && o.CriticLoRADim == 0:
				return usageErrorf("--only-optimize-lora needs --actor-lora-dim or --critic-lora-dim")
			case o.SaveInterval < 0:
				return usageErrorf("--save-interval must be >= 0")
			case o.Resume && o.Overwrite:
				return usageErrorf("--resume and --overwrite exclude each other")
			case zero.Stage(o.ActorZeRO).Validate() != nil:
				return usageErrorf("--actor-zero-stage %d: want 0, 1, 2 or 3", o.ActorZeRO)
			case zero.Stage(o.CriticZeRO).Validate() != nil:
				return usageErrorf("--critic-zero-stage %d: want 0, 1, 2 or 3", o.CriticZeRO)
			case o.offloadOptions.check(cmd.Flags()) != nil:
				return o.offloadOptions.check(cmd.Flags())
			case o.ActorDropout && o.NoActorDropout:
				return usageErrorf("--actor-dropout and --disable-actor-dropout exclude each other")
			case o.CriticDropout && o.NoCriticDropout:
				return usageErrorf("--critic-dropout and --disable-critic-dropout exclude each other")
			}
			f := cmd.Flags()
			if err := flagsBelow(f, flagMin{"per-device-generation-batch-size", 1}, flagMin{"per-device-training-batch-size", 1},
				flagMin{"generation-batches", 1}, flagMin{"gradient-accumulation-steps", 1}, flagMin{"ppo-epochs", 1}, flagMin{"num-warmup-steps", 0},
				flagMin{"max-prompt-seq-len", 1}, flagMin{"max-answer-seq-len", 2}); err != nil {
				return err
			}
			o.Sample.Greedy = f.Changed("greedy")
			if err := o.Sample.Validate(); err != nil {
				return usageError{err}
			}
			o.Config.ActorLR, o.Config.CriticLR = o.ActorLR, o.CriticLR
			o.Config.GenerationBatches, o.Config.PPOEpochs = o.GenerationBatches, o.PPOEpochs
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
			defer o.g.watchSignals()()
			return runPPO(context.Background(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Actor, "actor", "", "step-1 model (the actor and the frozen reference): a directory or a Hub id")
	bindDType(f, &o.DType)
	f.StringVar(&o.Critic, "critic", "", "step-2 model (the critic's starting point): a directory or a Hub id")
	f.StringVar(&o.Reward, "reward", "", "reward model: a directory or a Hub id (default: --critic)")
	f.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer directory or Hub id (default: --actor)")
	f.StringVar(&o.Revision, "revision", "", "Hub revision (branch, tag or commit) of the models named by Hub id (default main)")
	f.StringSliceVar(&o.Data, "data", []string{defaultData}, "prompt datasets (their phase-3 slice): Hub ids or files/folders")
	f.StringVar(&o.DataRevision, "data-revision", "", "Hub revision of the --data datasets named by Hub id (default main)")
	f.StringVar(&o.DataSplit, "data-split", "2,4,4", "proportions of the rows for steps 1, 2 and 3")
	f.IntVar(&o.GenBatch, "per-device-generation-batch-size", 16, "prompts per generation batch")
	f.IntVar(&o.TrainBatch, "per-device-training-batch-size", 16, "experience rows per PPO micro-batch")
	f.IntVar(&o.GenerationBatches, "generation-batches", 1, "generation batches collected before training on them")
	f.IntVar(&o.GradAccum, "gradient-accumulation-steps", 1, "micro-batches each rank accumulates per PPO iteration (one per stream of generation batches)")
	f.IntVar(&o.ActorZeRO, "actor-zero-stage", 0, "the actor's ZeRO stage over MPI ranks: 0 replicates everything, 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters (gathered once per generation phase)")
	f.IntVar(&o.CriticZeRO, "critic-zero-stage", 0, "the critic's ZeRO stage over MPI ranks (as --actor-zero-stage)")
	o.offloadOptions.bind(f)
	f.Lookup("offload").Usage = "keep the actor's and the critic's optimizer state (AdamW moments, fp32 master weights) in host memory, updated by the CPU while the device continues (ZeRO-Offload, DeepSpeed-Chat's --offload)"
	f.BoolVar(&o.OffloadRef, "offload-reference-model", false, "keep the frozen reference model's weights in host memory, each layer's copied to the device just before it runs (DeepSpeed-Chat's --offload_reference_model)")
	f.BoolVar(&o.OffloadReward, "offload-reward-model", false, "keep the frozen reward model's weights in host memory, each layer's copied to the device just before it runs (DeepSpeed-Chat's --offload_reward_model)")
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
	f.StringVar(&o.LoRAModule, "lora-module-name", "", "LoRA applies to linear layers whose name contains this (default: every linear layer of the decoder layers)")
	f.BoolVar(&o.OnlyLoRA, "only-optimize-lora", false, "train only the LoRA weights")
	f.Float64Var(&o.ActorLoRALR, "actor-lora-learning-rate", 5e-4, "actor LoRA learning rate")
	f.Float64Var(&o.CriticLoRALR, "critic-lora-learning-rate", 5e-4, "critic LoRA learning rate")
	f.BoolVar(&o.ActorCkpt, "actor-gradient-checkpointing", false, "recompute the actor's layers in the backward pass")
	f.BoolVar(&o.CriticCkpt, "critic-gradient-checkpointing", false, "recompute the critic's layers in the backward pass")
	f.BoolVar(&o.ActorDropout, "actor-dropout", false, "train the actor with its configured dropout (default off, as in TRL and OpenRLHF)")
	f.BoolVar(&o.CriticDropout, "critic-dropout", false, "train the critic with its configured dropout (default off)")
	f.BoolVar(&o.NoActorDropout, "disable-actor-dropout", false, "no dropout in the actor (DeepSpeed-Chat's flag; the default here)")
	f.BoolVar(&o.NoCriticDropout, "disable-critic-dropout", false, "no dropout in the critic (DeepSpeed-Chat's flag; the default here)")
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
	f.BoolVar(&o.SkipPreflight, "skip-preflight", false, skipPreflightHelp)
	f.StringVar(&o.EndText, "reward-end-text", data.DefaultEndText, "text appended to answers before the reward model scores them, as in step 2 (\"\" for none; not with a chat template)")
	bindChatTemplate(f, &o.ChatTemplate)
	return cmd
}

// fingerprint identifies a step-3 run by the settings that change its
// result.
func (o *PPOOptions) fingerprint() string { return fingerprintOf(o) }

// runPPO loads step 3's models and data, runs ppo.Run and saves the
// models.
func runPPO(ctx context.Context, o *PPOOptions) (err error) {
	dev, end, err := stepDevice(o.g, o.dev, stepName(3))
	if err != nil {
		return err
	}
	defer func() { err = end(err) }() // after finish: the communicator may use the device
	ranks, finish, err := stepRanks(o.g, o.ranks, dev)
	if err != nil {
		return err
	}
	defer func() { err = finish(err) }()
	log := o.g.Log
	if _, err := os.Stat(filepath.Join(o.OutputDir, runFile)); err != nil && !o.Overwrite {
		// A step-3 result without a run record (written by hand, or by an
		// older gochat) is not replaced silently.
		if _, err := os.Stat(filepath.Join(o.OutputDir, "actor", "config.json")); err == nil {
			return usageErrorf("--output-dir %s already holds a step-3 result; pass --overwrite to replace it", o.OutputDir)
		}
	}
	if err := resolveAndPreflight(o.g, o.Revision, o.resolveModels, func() error { return o.preflight(dev) },
		[2]string{"--actor", o.Actor}, [2]string{"--critic", o.Critic}, [2]string{"--reward", o.Reward}); err != nil {
		return err
	}
	if err := o.checkValueHeads(ranks.writer()); err != nil {
		return err
	}
	// The tokenizer and the chat template come first: the template is part
	// of the run's fingerprint.
	dt, tokEOS, pad, fp, err := loadDataTokenizer(o.tokDir, o.g.Threads)
	if err != nil {
		return err
	}
	tok := dt.t
	chat, err := resolveChatTemplate(o.ChatTemplate, o.tokDir, tok)
	if err != nil {
		return err
	}
	o.chat = chat
	if chat != nil {
		o.ChatDigest = chat.Digest()
		log.Info().Str("chat_template", chatName(o.ChatTemplate, chat)).Msg("step 3 renders the prompts with the chat template")
		if o.EndText != data.DefaultEndText {
			log.Warn().Str("reward_end_text", o.EndText).Msg("--reward-end-text is not used with a chat template: the template's end of turn ends the answer")
		}
	}
	o.Streams = o.GradAccum * ranks.comm.Size()
	begin, release, err := ranks.claimRunDir(o.g, dev, o.OutputDir, o, &o.Resume, o.Overwrite)
	if err != nil {
		return err
	}
	defer release()
	wdt, err := resolveDType(o.g, o.DType, dev)
	if err != nil {
		return err
	}
	// In bf16 every model holds bf16 weights only: the frozen reference
	// and reward model have nothing else, the actor and critic get the
	// low halves of fp32 master weights from their optimizers.
	load := func(dir, vh string) (*model.Model, error) {
		return model.Load(dev, dir, model.LoadOptions{ValueHead: vh, ValueHeadSeed: o.Seed, DType: wdt})
	}
	// One host device for everything offloaded.
	var host kernels.Device
	if o.Offload || o.OffloadRef || o.OffloadReward {
		if host, err = newHostDevice(o.g, dev); err != nil {
			return err
		}
	}
	// A frozen model offloaded to the host is loaded before the others and
	// offloaded at once, so that the device never holds it whole beside
	// them (the memory planner counts on it).
	loadFrozen := func(dir, vh, name string, offload bool) (*model.Model, error) {
		m, err := load(dir, vh)
		if err != nil || !offload {
			return m, err
		}
		f, err := train.OffloadFrozen(host, m, dev)
		if err != nil {
			return nil, fmt.Errorf("--offload-%s-model: %w", name, err)
		}
		ev := log.Info()
		if !f.Saves() {
			ev = log.Warn()
		}
		ev.Str("model", name).Int64("host_bytes", f.HostBytes()).Bool("device_memory_saved", f.Saves()).
			Msgf("offload: the %s model's weights live on the host, each layer copied to the device as it runs", name)
		return m, nil
	}
	var ref, rm *model.Model
	if o.OffloadRef {
		if ref, err = loadFrozen(o.actorDir, "no", "reference", true); err != nil {
			return err
		}
	}
	if o.OffloadReward {
		if rm, err = loadFrozen(o.rewardDir, "require", "reward", true); err != nil {
			return err
		}
	}
	actor, err := load(o.actorDir, "no")
	if err != nil {
		return err
	}
	if ref == nil {
		if ref, err = load(o.actorDir, "no"); err != nil {
			return err
		}
	}
	critic, err := load(o.criticDir, "yes")
	if err != nil {
		return err
	}
	if rm == nil {
		if rm, err = load(o.rewardDir, "require"); err != nil {
			return err
		}
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
	sample := o.Sample
	sample.Seed = o.Seed
	var stops []int32 // more ids than the actor's EOS that end an answer
	for _, id := range stopIDs(tok, chat) {
		if int(id) != actor.Config.EOSTokenID && int(id) < actor.Config.VocabSize {
			stops = append(stops, id)
		}
	}
	eng, err := hybridengine.New(actor, actorLoRA, hybridengine.Options{MaxAnswerLen: o.MaxAnswerLen, Sample: sample,
		KeepInferenceCache: o.KeepCache, GradientCheckpointing: o.ActorCkpt, StopIDs: stops})
	if err != nil {
		return err
	}
	models := ppo.Models{Actor: eng, ActorLoRA: actorLoRA, Ref: ref, Critic: critic, CriticLoRA: criticLoRA, Reward: rm}
	endLen := 0
	switch {
	case chat != nil:
		// The rendered answer adds the template's lead and end of turn.
		endLen = len(tok.Encode(chat.Lead, false)) + len(tok.Encode(chat.End, false))
	case o.EndText != "":
		endLen = len(tok.Encode(o.EndText, false))
	}
	if err := ppo.CheckLengths(models, o.MaxPromptLen, o.MaxAnswerLen, endLen); err != nil {
		return usageError{err}
	}
	eos := int32(actor.Config.EOSTokenID)
	dopts := data.Options{Split: o.split, Seed: uint32(o.Seed), MaxPromptLen: o.MaxPromptLen, MaxAnswerLen: o.MaxAnswerLen,
		EOS: tokEOS, PAD: pad, Tokenizer: dt, TokenizerID: fp, CacheDir: dataCacheDir(o.DataCache), Chat: chat}
	d, err := o.loadData(actor, tok, eos, dopts)
	if err != nil {
		return err
	}
	rewardSeq := rewardSequence(tok, eos, o.EndText)
	if chat != nil {
		cr := newChatReward(tok, chat, d.Prompts, eng.Stops)
		rewardSeq, d.Show = cr.sequence, cr.texts
	}
	rc := ppo.RunConfig{Config: o.Config, Options: ppo.Options{ActorWeightDecay: o.ActorWD, CriticWeightDecay: o.CriticWD,
		ActorLoRALR: o.ActorLoRALR, CriticLoRALR: o.CriticLoRALR, OnlyOptimizeLoRA: o.OnlyLoRA,
		Schedule: o.Scheduler, Warmup: o.Warmup, MaxGradNorm: o.MaxGradNorm,
		ActorDropout: o.ActorDropout, CriticDropout: o.CriticDropout, CriticCheckpointing: o.CriticCkpt,
		EnableEMA: o.EnableEMA, Seed: o.Seed,
		RewardSequence: rewardSeq,
		Comm:           ranks.comm, ActorZeRO: zero.Stage(o.ActorZeRO), CriticZeRO: zero.Stage(o.CriticZeRO)},
		GenBatch: o.GenBatch, TrainBatch: o.TrainBatch, GradAccum: o.GradAccum, Epochs: o.Epochs, MaxSteps: o.MaxSteps,
		SaveEvery: o.SaveInterval, Dir: o.OutputDir, Fingerprint: o.fingerprint(), Resume: o.Resume,
		PrintAnswers: o.PrintAnswers && ranks.writer(), Log: log, Stop: o.g.Stop}
	if o.g.LogFmt != "json" && isTerminal(o.g.Err) && ranks.writer() {
		rc.Progress = o.g.Err
	}
	if o.Offload {
		rc.Offload = train.Offload{Host: host, Ratio: o.OffloadRatio}
	}
	log.Info().Int("actor_params", actor.NumParams()).Str("device", dev.Name()).Bool("actor_dropout", o.ActorDropout).
		Bool("critic_dropout", o.CriticDropout).Int("ranks", ranks.comm.Size()).Int("streams", o.Streams).Msg("step 3")
	// Everything is loaded and checked: the run starts here.
	if err := begin(); err != nil {
		return err
	}
	res, err := ppo.Run(ctx, dev, rc, models, d)
	if err != nil {
		return resumeHint(err, o.ranks != nil)
	}
	if !ranks.writer() {
		return nil
	}
	if err := o.savePPO(eng, actorLoRA, critic, criticLoRA, res.Trainer); err != nil {
		return err
	}
	// The outputs are complete: the checkpoint (the size of two models and
	// their optimizers) has served its purpose.
	if err := train.RemoveCheckpoint(o.OutputDir); err != nil {
		log.Warn().Err(err).Msg("checkpoint not removed")
	}
	if _, err := train.PlotMetrics(filepath.Join(o.OutputDir, train.MetricsFile), o.OutputDir); err != nil {
		log.Warn().Err(err).Msg("training curves not drawn")
	}
	tm := res.Timing
	log.Info().Int("rounds", res.Rounds).Int("ppo_steps", res.PPOSteps).Str("elapsed", time.Duration(tm.TotalSeconds*float64(time.Second)).Round(time.Second).String()).
		Float64("generation_seconds", tm.GenerationSeconds).Float64("experience_seconds", tm.ExperienceSeconds).
		Float64("training_seconds", tm.TrainingSeconds).Float64("generation_tokens_per_sec", tm.GenerationTokensPerSec).
		Float64("training_tokens_per_sec", tm.TrainingTokensPerSec).Str("output", o.OutputDir).Msg("done")
	logMemory(o.g, dev, stepName(3))
	return nil
}

// checkValueHeads looks for the value heads (score.weight or v_head.weight) of the reward
// model and the critic before anything is written: a reward model without
// one is refused (a fresh head would score at random), a critic without
// one starts with a fresh head seeded by --seed, with a notice (a
// legitimate start, which gochat's demo recipe takes from the step-1
// model; DeepSpeed-Chat starts the critic from the step-2 reward model).
// notice says whether this rank logs it.
func (o *PPOOptions) checkValueHeads(notice bool) error {
	ok, err := model.SavedValueHead(o.rewardDir)
	if err != nil {
		return fmt.Errorf("--reward %s: %w", o.Reward, err)
	}
	if !ok {
		def := ""
		if o.Reward == o.Critic {
			def = " (the default: --critic)"
		}
		return usageErrorf("--reward %s%s has no value head (score.weight or v_head.weight): it is not a reward model, and a fresh head would score answers at random; pass a step-2 output (gochat reward) as --reward", o.Reward, def)
	}
	if ok, err = model.SavedValueHead(o.criticDir); err != nil {
		return fmt.Errorf("--critic %s: %w", o.Critic, err)
	}
	if !ok && notice {
		o.g.Log.Info().Str("critic", o.Critic).Bool("fresh_value_head", true).
			Msgf("--critic %s has no value head (score.weight or v_head.weight): the critic starts with a fresh one seeded by --seed (DeepSpeed-Chat starts it from the step-2 reward model)", o.Critic)
	}
	return nil
}

// resolveModels finds the local directories of the actor, critic, reward
// model and tokenizer (downloading Hub ids the cache lacks).
func (o *PPOOptions) resolveModels() error {
	var err error
	if o.actorDir, o.tokDir, err = resolveModelTokenizer(o.g, o.Actor, o.Tokenizer, o.Revision); err != nil {
		return err
	}
	if o.criticDir, err = resolveModel(o.g, o.Critic, o.Revision); err != nil {
		return err
	}
	o.rewardDir, err = resolveModel(o.g, o.Reward, o.Revision)
	return err
}

// rewardSequence is what step 3's reward model scores for a prompt and
// an answer (ids): the texts joined with the end text and tokenized as
// one, as step 2 trained it and as `gochat score` scores text.
func rewardSequence(tok *tokenizer.Tokenizer, eos int32, endText string) func(prompt, answer []int32) ([]int32, error) {
	return func(prompt, answer []int32) ([]int32, error) {
		return reward.SequenceFromIDs(tok, prompt, answer, eos, endText)
	}
}

// loadData loads the phase-3 prompts and the unsupervised blocks (both
// tokenized with dopts), with the texts and answer checker of ppo.Data.
func (o *PPOOptions) loadData(actor *model.Model, tok *tokenizer.Tokenizer, eos int32, dopts data.Options) (ppo.Data, error) {
	prompts, err := o.loadPrompts(dopts)
	if err != nil {
		return ppo.Data{}, err
	}
	d := ppo.Data{Prompts: prompts.Examples, PromptLen: o.MaxPromptLen, PAD: int32(actor.Config.PadTokenID),
		Show: func(prompt, answer []int32) (string, string, error) { return reward.Texts(tok, prompt, answer, eos) }}
	if o.UnsupData != "" {
		dopts.Chat = nil // plain text
		set, err := o.loadUnsupervised(dopts)
		if err != nil {
			return ppo.Data{}, err
		}
		d.Unsup, d.UnsupLen = set.Examples, o.MaxPromptLen+o.MaxAnswerLen
	}
	if o.check != nil {
		d.Check = func(prompt, answer []int32) (bool, bool) {
			p, err1 := tok.Decode(prompt, true)
			a, err2 := tok.Decode(answer, true)
			if err1 != nil || err2 != nil {
				return false, false
			}
			return o.check(p, a)
		}
	}
	return d, nil
}

// loadUnsupervised loads --unsupervised-dataset.
func (o *PPOOptions) loadUnsupervised(dopts data.Options) (*data.Set, error) {
	ds, err := data.Resolve(o.UnsupData, hubData(o.g, data.ResolveOptions{}, ""))
	if err != nil {
		return nil, fmt.Errorf("--unsupervised-dataset: %w", err)
	}
	dopts.Split, dopts.Seed = nil, 0 // a plain-text train split, not cut into phases
	set, err := data.LoadUnsupervised(ds, o.UnsupColumn, dopts)
	if err != nil {
		return nil, fmt.Errorf("--unsupervised-dataset %s: %w", o.UnsupData, err)
	}
	logDataStats(o.g, "", set.Stats)
	if len(set.Examples) == 0 {
		return nil, usageErrorf("--unsupervised-dataset %s has no text in its train split", o.UnsupData)
	}
	o.g.Log.Info().Int("blocks", len(set.Examples)).Str("dataset", o.UnsupData).Float64("unsup_coef", o.Config.UnsupCoef).Msg("mixture training")
	return set, nil
}

// loadPrompts builds the phase-3 prompts.
func (o *PPOOptions) loadPrompts(dopts data.Options) (*data.Set, error) {
	dss, err := resolveData(o.Data, hubData(o.g, data.ResolveOptions{}, o.DataRevision))
	if err != nil {
		return nil, err
	}
	set, _, err := data.Load(dss, nil, data.PhasePPO, dopts)
	if err != nil {
		return nil, err
	}
	logDataStats(o.g, fmt.Sprintf("--max-prompt-seq-len %d", o.MaxPromptLen), set.Stats)
	if len(set.Examples) == 0 {
		var tooLong int64
		for _, st := range set.Stats {
			tooLong += st.TooLong
		}
		if n := selectedRows(set); n > 0 {
			why := fmt.Sprintf("%d with a prompt longer than --max-prompt-seq-len %d", tooLong, o.MaxPromptLen)
			if tooLong < n {
				why += fmt.Sprintf(", %d for the reasons the warnings give", n-tooLong)
			}
			if tooLong > 0 {
				why += "; raise --max-prompt-seq-len"
			}
			return nil, usageErrorf("no step-3 prompts left in --data %s: all %d rows --data-split %s gives step 3 were dropped (%s)",
				datasetNames(set), n, o.DataSplit, why)
		}
		return nil, usageErrorf("no step-3 prompts in --data %s after --data-split %s; give step 3 a larger share or more data", datasetNames(set), o.DataSplit)
	}
	return set, nil
}

// savePPO writes actor/ (LoRA fused), critic/ (with its value head, as XForSequenceClassification) and actor_ema/.
func (o *PPOOptions) savePPO(eng *hybridengine.Engine[*model.Model], actorLoRA *lora.LoRA, critic *model.Model, criticLoRA *lora.LoRA, tr *ppo.Trainer) error {
	actor, err := eng.Model()
	if err != nil {
		return err
	}
	save := func(m *model.Model, lo *lora.LoRA, loraParams kernels.Buffer, dir string) error {
		if err := saveModelDir(m, lo, loraParams, dir, o.tokDir); err != nil {
			return err
		}
		return saveChatTemplate(dir, o.ChatTemplate, o.chat)
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
