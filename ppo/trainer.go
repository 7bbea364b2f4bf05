package ppo

import (
	"fmt"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/zero"

	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/train"
)

// Forwarder is a model step 3 runs forward passes of, on activation
// buffers it keeps between passes (laid out for the model's config, device
// and value head).
type Forwarder interface {
	ModelConfig() *model.Config
	Device() kernels.Device
	HasValueHead() bool
	ReuseActs(a *model.Acts, b, t int, opts model.ActsOptions) (*model.Acts, error)
	Forward(a *model.Acts, in model.Batch) error
}

// LogProber is a model step 3 reads token log-probabilities from (the
// actor's Generate-mode view, the reference).
type LogProber interface {
	Forwarder
	Losses(a *model.Acts) ([]float32, error)
}

// Reference is what step 3 uses of the frozen reference model: its
// log-probabilities and its size (it must be the actor's architecture).
type Reference interface {
	LogProber
	NumParams() int
}

// Critic is what step 3 uses of the critic: its values, their backward
// pass, and what train.ModelTrainable needs to build its optimizer.
type Critic interface {
	Forwarder
	train.Model
	Values(a *model.Acts) ([]float32, error)
	Backward(a *model.Acts, g model.Grad) error
}

// Actor is what step 3 uses of the actor in Train mode (Engine.Model):
// its log-probabilities and LM loss, their backward passes, its flat
// parameters (the EMA) and what train.ModelTrainable needs.
type Actor interface {
	LogProber
	train.Model
	MeanLoss(a *model.Acts) (float32, int, error)
	MeanLossGrad(a *model.Acts) model.Grad
	Backward(a *model.Acts, g model.Grad) error
}

// configured is a model whose configuration is checked.
type configured interface{ ModelConfig() *model.Config }

var (
	_ Reference = (*model.Model)(nil)
	_ Critic    = (*model.Model)(nil)
	_ Actor     = (*model.Model)(nil)
)

// Models are the four models of step 3.
type Models struct {
	// Actor is the trained policy behind the hybrid engine (an Actor, the
	// engine's Model); the engine hands out the model's own type, so it is
	// the concrete *model.Model here. ActorLoRA is the engine's adapter set
	// (nil without LoRA), trained with the actor.
	Actor     *hybridengine.Engine[*model.Model]
	ActorLoRA *lora.LoRA
	// Ref is the frozen reference (the SFT model): no gradients, never
	// changed.
	Ref Reference
	// Critic is the trained value model (a value head; initialised from the
	// reward model). CriticLoRA, when not nil, must already be attached to
	// Critic with SetAdapter.
	Critic     Critic
	CriticLoRA *lora.LoRA
	// Reward is the frozen reward model (a value head): no gradients, never
	// changed.
	Reward reward.Scorer
}

// Options configure a Trainer beyond the PPO constants of Config.
type Options struct {
	// ActorWeightDecay and CriticWeightDecay are AdamW's decoupled weight
	// decay (DeepSpeed-Chat's actor_weight_decay, critic_weight_decay).
	ActorWeightDecay, CriticWeightDecay float64
	// ActorLoRALR and CriticLoRALR are the adapters' learning rates
	// (actor_lora_learning_rate, critic_lora_learning_rate).
	ActorLoRALR, CriticLoRALR float64
	// OnlyOptimizeLoRA trains only the adapters (and the critic's value
	// head) when LoRA is used.
	OnlyOptimizeLoRA bool
	// Schedule names the learning-rate schedule of both models
	// (optim.ScheduleNames; "" is constant) with Warmup steps of warm-up
	// out of Iterations. The schedules count PPO iterations (TrainStep
	// calls), as DeepSpeed-Chat's do: a mixture-training step is a second
	// actor update at the same iteration's rate. Past Iterations the
	// schedule holds its end value.
	Schedule           string
	Warmup, Iterations int
	// MaxGradNorm clips each model's gradients to this global norm before
	// its step (DeepSpeed's gradient_clipping, 1.0 in DeepSpeed-Chat); <= 0
	// disables clipping.
	MaxGradNorm float64
	// ActorDropout and CriticDropout apply the models' configured dropout in
	// the training forwards. Off by default, as in TRL and OpenRLHF: the
	// old log-probs and values come from dropout-free passes, so with
	// dropout the first PPO epoch's ratio would not be 1 and clipping would
	// fire on noise. (DeepSpeed-Chat keeps dropout on unless
	// --disable-actor-dropout.)
	ActorDropout, CriticDropout bool
	// CriticCheckpointing recomputes the critic's layers in its backward
	// pass (--critic-gradient-checkpointing). The actor's is the engine's
	// Options.GradientCheckpointing.
	CriticCheckpointing bool
	// EnableEMA keeps an exponential moving average of the actor's trained
	// weights (--enable-ema), updated after every actor step with
	// Config.EMABeta.
	EnableEMA bool
	// Seed keys the dropout masks of the training forwards.
	Seed uint64
	// RewardSequence, when set, builds the token sequence the reward model
	// scores from a prompt and its answer (real tokens only; the answer
	// ends with EOS when the actor emitted one): the way step 2 trained it
	// (reward.SequenceFromIDs: the texts joined with the end text and
	// tokenized as one). The score is the value at its last token. Without
	// it the reward model scores the prompt and answer as generated.
	RewardSequence func(prompt, answer []int32) ([]int32, error)
	// Score, when set, replaces the reward model: a rule-based reward of a
	// prompt and its answer (real tokens only; the answer ends with EOS when
	// the actor emitted one), as reward functions in Hugging Face TRL.
	Score func(prompt, answer []int32) float32
	// Comm is the group of ranks that train data-parallel (nil: this
	// process alone); see the package's data parallelism. ActorZeRO and
	// CriticZeRO are the two models' ZeRO stages over it (DeepSpeed-Chat's
	// --actor_zero_stage and --critic_zero_stage).
	Comm                  dist.Comm
	ActorZeRO, CriticZeRO zero.Stage
	// Offload keeps the optimizer state of the actor and the critic (each
	// a fraction of its parameters) in host memory, updated by the host
	// (ZeRO-Offload, DeepSpeed-Chat's --offload); the zero value: none.
	Offload train.Offload
}

// Trainer runs DeepSpeed-Chat's step 3 (generate_experience and
// train_rlhf) on four models: GenerateExperience, then TrainStep on
// micro-batches of the experience. Run drives it on the training loop.
type Trainer struct {
	cfg  Config
	opts Options
	m    Models

	actorOpt, criticOpt *train.Optimizer
	// emaFlat is the EMA of the actor's flat parameters (nil when they are
	// frozen: the EMA of a constant is the constant); emaLoRA that of its
	// adapters.
	emaFlat, emaLoRA kernels.Buffer
	moments          RunningMoments // of the raw scores, with Config.ScoreScaling
	steps            uint64         // TrainStep calls: the schedules' index, keys the dropout seeds
	acts             actsCache
}

// NewTrainer checks the models' compatibility and builds the two
// optimizers (train.ModelTrainable's groups, DeepSpeed-Chat's AdamW). The
// engine is put in Train mode.
func NewTrainer(cfg Config, opts Options, m Models) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m.Actor == nil || m.Ref == nil || m.Critic == nil || m.Reward == nil {
		return nil, fmt.Errorf("ppo: trainer needs actor, reference, critic and reward models")
	}
	m.Actor.Train()
	actor, err := m.Actor.Model()
	if err != nil {
		return nil, err
	}
	if !m.Critic.HasValueHead() || !m.Reward.HasValueHead() {
		return nil, fmt.Errorf("ppo: the critic and the reward model need a value head")
	}
	v := actor.ModelConfig().VocabSize
	for _, x := range []struct {
		name string
		m    configured
	}{{"reference", m.Ref}, {"critic", m.Critic}, {"reward", m.Reward}} {
		if x.m.ModelConfig().VocabSize != v {
			return nil, fmt.Errorf("ppo: %s model has vocabulary %d, the actor %d", x.name, x.m.ModelConfig().VocabSize, v)
		}
	}
	if m.Ref.NumParams() != actor.NumParams() {
		return nil, fmt.Errorf("ppo: reference model has %d parameters, the actor %d (want the same architecture)", m.Ref.NumParams(), actor.NumParams())
	}
	t := &Trainer{cfg: cfg, opts: opts, m: m}
	schedule := opts.Schedule
	if schedule == "" {
		schedule = "constant"
	}
	oc := train.OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: schedule, Warmup: opts.Warmup,
		Total: opts.Iterations, ClipNorm: opts.MaxGradNorm, Comm: opts.Comm, Offload: opts.Offload}
	actorTr, err := train.ModelTrainable(actor, train.ParamOptions{LR: cfg.ActorLR, WeightDecay: opts.ActorWeightDecay,
		LoRA: m.ActorLoRA, LoRALR: opts.ActorLoRALR, OnlyLoRA: opts.OnlyOptimizeLoRA})
	if err != nil {
		return nil, fmt.Errorf("ppo: actor: %w", err)
	}
	criticTr, err := train.ModelTrainable(m.Critic, train.ParamOptions{LR: cfg.CriticLR, WeightDecay: opts.CriticWeightDecay,
		LoRA: m.CriticLoRA, LoRALR: opts.CriticLoRALR, OnlyLoRA: opts.OnlyOptimizeLoRA})
	if err != nil {
		return nil, fmt.Errorf("ppo: critic: %w", err)
	}
	oc.ZeRO = opts.ActorZeRO
	if t.actorOpt, err = train.NewOptimizer(actor.Device(), actorTr, oc); err != nil {
		return nil, fmt.Errorf("ppo: actor optimizer: %w", err)
	}
	oc.ZeRO = opts.CriticZeRO
	if t.criticOpt, err = train.NewOptimizer(m.Critic.Device(), criticTr, oc); err != nil {
		t.actorOpt.Free()
		return nil, fmt.Errorf("ppo: critic optimizer: %w", err)
	}
	if opts.EnableEMA {
		d := actor.Device()
		// The EMA is fp32 even for bf16 weights: 1−β = 0.008 of a step
		// is below bf16's resolution and would be lost.
		if !actor.BaseFrozen() {
			if t.emaFlat, err = d.Alloc(kernels.F32, actor.NumParams()); err != nil {
				return nil, fmt.Errorf("ppo: actor EMA: %w", err)
			}
			d.Copy(t.emaFlat, actor.Parameters().Flat)
		}
		if m.ActorLoRA != nil {
			if t.emaLoRA, err = d.Alloc(kernels.F32, m.ActorLoRA.NumParams()); err != nil {
				return nil, fmt.Errorf("ppo: actor LoRA EMA: %w", err)
			}
			d.Copy(t.emaLoRA, m.ActorLoRA.Params)
		}
	}
	return t, nil
}

// group is the ranks the Trainer averages over.
func (t *Trainer) group() group {
	actor, _ := t.m.Actor.Model()
	return group{comm: t.opts.Comm, dev: actor.Device()}
}

// Sharded reports whether the ranks hold different parts of the trained
// state (ZeRO 1-3 on several ranks): each then checkpoints its own.
func (t *Trainer) Sharded() bool { return t.actorOpt.Sharded() || t.criticOpt.Sharded() }

// gatherModels keeps the ZeRO-3 parameters of both models whole until
// partitionModels: the experience phase's passes (generation, the
// gradient-free forwards) then make no collectives, however many batches
// a rank generates (DESIGN.md §4: gathered once per generation phase).
func (t *Trainer) gatherModels() error {
	if err := t.actorOpt.Gather(); err != nil {
		return fmt.Errorf("ppo: gather the actor: %w", err)
	}
	if err := t.criticOpt.Gather(); err != nil {
		return fmt.Errorf("ppo: gather the critic: %w", err)
	}
	return nil
}

// partitionModels ends gatherModels.
func (t *Trainer) partitionModels() {
	t.actorOpt.Partition()
	t.criticOpt.Partition()
}

// Consolidate gives every rank both trained models whole (ZeRO-3
// gathers their parameters and the EMA), to save them.
func (t *Trainer) Consolidate() error {
	if err := t.actorOpt.Consolidate(); err != nil {
		return fmt.Errorf("ppo: actor: %w", err)
	}
	if err := t.criticOpt.Consolidate(); err != nil {
		return fmt.Errorf("ppo: critic: %w", err)
	}
	if t.emaFlat != nil {
		if err := t.actorOpt.GatherLike(emaOf, t.emaFlat); err != nil {
			return fmt.Errorf("ppo: actor EMA: %w", err)
		}
	}
	return nil
}

// emaOf is the State buffer the actor's EMA averages (the flat
// parameters): under ZeRO-3 the EMA is partitioned as they are.
const emaOf = "model"

// Config returns the PPO constants.
func (t *Trainer) Config() Config { return t.cfg }

// Optimizers returns the actor's and the critic's optimizers.
func (t *Trainer) Optimizers() (actor, critic *train.Optimizer) { return t.actorOpt, t.criticOpt }

// EMA returns the actor EMA's parameters (the model's flat layout; nil when
// the base weights are frozen, whose EMA is the base itself) and its LoRA
// parameters (nil without LoRA); both nil unless Options.EnableEMA.
// actor.WithParams(flat) views the EMA model; with LoRA, fuse the EMA
// adapters into a copy before saving.
func (t *Trainer) EMA() (flat, loraParams kernels.Buffer) { return t.emaFlat, t.emaLoRA }

// TrainerState is the host-side state of a Trainer that a checkpoint
// records besides StateBuffers.
type TrainerState struct {
	Steps uint64 `json:"steps"`
	// ScoreMoments are the running moments of score scaling.
	ScoreMoments   RunningMoments `json:"score_moments"`
	ActorOptSteps  int            `json:"actor_optimizer_steps"`
	CriticOptSteps int            `json:"critic_optimizer_steps"`
}

// StateBuffers returns, by name, the device buffers a step-3 checkpoint
// saves and restores: the actor's and the critic's trained parameters
// (with their LoRA adapters), the EMA, and both optimizers' moments. The
// frozen reference and reward models are not included.
func (t *Trainer) StateBuffers() map[string]kernels.Buffer {
	bufs := map[string]kernels.Buffer{}
	t.actorOpt.StateBuffers(bufs, "actor.")
	t.criticOpt.StateBuffers(bufs, "critic.")
	if t.emaFlat != nil {
		if rs, ok := t.actorOpt.Partitioned(emaOf); ok {
			for _, r := range rs {
				bufs[train.RangeName("ema.model", r.Lo)] = t.emaFlat.Slice(r.Lo, r.Len())
			}
		} else {
			bufs["ema.model"] = t.emaFlat
		}
	}
	if t.emaLoRA != nil {
		bufs["ema.lora"] = t.emaLoRA
	}
	return bufs
}

// State returns the host-side state for a checkpoint.
func (t *Trainer) State() TrainerState {
	return TrainerState{Steps: t.steps, ScoreMoments: t.moments, ActorOptSteps: t.actorOpt.Steps(), CriticOptSteps: t.criticOpt.Steps()}
}

// Restore sets the host-side state from a checkpoint (after its
// StateBuffers were loaded), so the next TrainStep continues as the
// interrupted run would have.
func (t *Trainer) Restore(s TrainerState) {
	t.steps, t.moments = s.Steps, s.ScoreMoments
	t.actorOpt.SetSteps(s.ActorOptSteps)
	t.criticOpt.SetSteps(s.CriticOptSteps)
}
