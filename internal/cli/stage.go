package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/sft"
	"github.com/gochat-ai/gochat/train"
	"github.com/gochat-ai/gochat/zero"
)

// StageOptions are the options of `gochat sft` and `gochat reward`; flag
// names are DeepSpeed-Chat's in kebab case.
type StageOptions struct {
	g     *Globals
	ranks *group         // the job's ranks when gochat train runs the step (stepRanks)
	dev   kernels.Device // gochat train's device for its steps (trainStepDevice); nil: the step opens --device's
	Step  int            `json:"step"` // 1 (sft) or 2 (reward)

	Model       string   `json:"model"`
	Tokenizer   string   `json:"tokenizer"`
	Data        []string `json:"data"`
	DataSplit   string   `json:"data_split"`
	MaxSeqLen   int      `json:"max_seq_len"`
	TrainBatch  int      `json:"per_device_train_batch_size"`
	EvalBatch   int      `json:"-"`
	LR          float64  `json:"learning_rate"`
	WeightDecay float64  `json:"weight_decay"`
	Epochs      int      `json:"num_train_epochs"`
	MaxSteps    int      `json:"max_steps"`
	GradAccum   int      `json:"-"` // in GlobalBatch
	ZeROStage   int      `json:"-"` // changes only the summation order
	offloadOptions
	Scheduler     string  `json:"lr_scheduler_type"`
	Warmup        int     `json:"num_warmup_steps"`
	Seed          uint64  `json:"seed"`
	GradCkpt      bool    `json:"-"`
	Dropout       float64 `json:"dropout"`
	LoRADim       int     `json:"lora_dim"`
	LoRAModule    string  `json:"lora_module_name"`
	OnlyLoRA      bool    `json:"only_optimize_lora"`
	LoRALR        float64 `json:"lora_learning_rate"`
	MaxGradNorm   float64 `json:"max_grad_norm"`
	DType         string  `json:"dtype"`
	AddEOT        bool    `json:"add_eot_token"`
	LossOn        string  `json:"loss_on,omitempty"`
	OutputDir     string  `json:"-"`
	EvalInterval  int     `json:"-"`
	SaveInterval  int     `json:"-"`
	Resume        bool    `json:"-"`
	Overwrite     bool    `json:"-"`
	TensorBoard   bool    `json:"-"`
	DataCache     string  `json:"-"`
	SkipMalformed bool    `json:"skip_malformed"`
	Adapter       string  `json:"adapter,omitempty"`
	SkipPreflight bool    `json:"-"`
	Columns       data.ColumnMap
	Revision      string `json:"revision,omitempty"`
	DataRevision  string `json:"data_revision,omitempty"`
	// ChatTemplate is --chat-template; ChatDigest the resolved template's
	// digest, "" for DeepSpeed-Chat's text (so runs without a template keep
	// the fingerprints they had before the flag).
	ChatTemplate string `json:"-"`
	ChatDigest   string `json:"chat_template,omitempty"`
	// Ranks is the number of data-parallel ranks. A run's fingerprint
	// holds the global batch (per-device batch × accumulation × ranks)
	// instead: the same global batch on another number of ranks computes
	// the same batches, so a checkpoint resumes there.
	Ranks       int `json:"-"`
	GlobalBatch int `json:"global_batch_size"`
	split       data.Split
	// modelDir and tokDir are the local directories of Model and Tokenizer
	// (Hub snapshots for Hub ids).
	modelDir, tokDir string
	// The tokenizer as data uses it, its special ids and fingerprint, and
	// the resolved --chat-template (nil: DeepSpeed-Chat's text).
	dtok     dataTokenizer
	eos, pad int32
	tokFP    string
	chat     *data.ChatFormat
}

func newSFTCmd(g *Globals, runF func(*StageOptions) error) *cobra.Command {
	opts := &StageOptions{g: g, Step: 1}
	cmd := &cobra.Command{
		Use:   "sft --model DIR|HUB_ID --data NAME|PATH... --output-dir DIR",
		Short: "Step 1: supervised fine-tuning on prompt+chosen texts",
		Long: `Step 1 of RLHF: fine-tune a causal LM on prompt+chosen responses (the phase-1
slice of --data-split). The output directory receives a Hugging Face model
(config.json, model.safetensors, tokenizer files; LoRA fused in), metrics.jsonl,
training-curve PNGs, TensorBoard events with --enable-tensorboard, and
checkpoint/ for --resume.

--loss-on response (the default) takes the loss on response tokens only, the
way instruction tuning is usually done: the prompt is given, the model learns
to answer it. --loss-on all takes it on every token, as DeepSpeed-Chat does.

--chat-template auto (the default) renders each row as a chat conversation
with the tokenizer's chat template when it has one: the DeepSpeed-Chat prompt
"\n\nHuman: q1\n\nAssistant: a1\n\nHuman: q2\n\nAssistant:" becomes the
messages user q1, assistant a1, user q2, the chosen response the final
assistant message, and the rendered text is tokenized without the tokenizer's
own BOS (a template writes its own, as apply_chat_template(tokenize=True)).
--loss-on response then takes the loss on every assistant message (its text
and the template's end of turn). A template that renders earlier assistant
turns differently once later turns follow (Qwen3 drops their <think> blocks)
gets the loss on the last assistant turn only, with a warning: give
--chat-template FILE a training template that renders every turn alike to
train on them all. Rows whose prompt is not alternating Human/Assistant turns
are dropped and counted. Without a template (OPT), or with --chat-template
none, rows are DeepSpeed-Chat's text as before. --chat-template FILE renders
with that Jinja file and writes it to the output as chat_template.jinja.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.LossOn != "response" && opts.LossOn != "all" {
				return usageErrorf("--loss-on %q: want response or all", opts.LossOn)
			}
			return opts.check(cmd, runF)
		},
	}
	opts.bind(cmd, 9.65e-6, 0)
	cmd.Flags().StringVar(&opts.LossOn, "loss-on", "response", "tokens that carry the loss: response or all")
	return cmd
}

func newRewardCmd(g *Globals, runF func(*StageOptions) error) *cobra.Command {
	opts := &StageOptions{g: g, Step: 2}
	cmd := &cobra.Command{
		Use:   "reward --model DIR|HUB_ID --data NAME|PATH... --output-dir DIR",
		Short: "Step 2: train a reward model on chosen/rejected pairs",
		Long: `Step 2 of RLHF: a reward model (the decoder plus a value head v_head, one scalar
per token) trained with the pairwise loss over the span where chosen and
rejected differ (the phase-2 slice of --data-split). Reports accuracy (chosen
score > rejected score) and the mean chosen and rejected scores. The output is
a Hugging Face directory in transformers' XForSequenceClassification layout
(the value head as score.weight, num_labels 1: AutoModelForSequenceClassification
loads it and scores as gochat does), plus metrics, plots and checkpoint/ as
for sft.

With a chat template (--chat-template, as for sft) the chosen and rejected
sequences are the conversation with that answer as the last assistant message,
rendered (no --reward-end-text: the template's end of turn ends the answer);
the score is read at the last token as without one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return opts.check(cmd, runF) },
	}
	opts.bind(cmd, 5e-5, 0.1)
	return cmd
}

func (o *StageOptions) bind(cmd *cobra.Command, lr, wd float64) {
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "", "model to start from: a directory, a Hub id (facebook/opt-1.3b) or a short form (1.3b, opt-350m)")
	bindDType(f, &o.DType)
	f.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer directory or Hub id (default: --model)")
	f.StringVar(&o.Revision, "revision", "", "Hub revision (branch, tag or commit) of models named by Hub id (default main)")
	f.StringSliceVar(&o.Data, "data", []string{defaultData}, "datasets: Hub ids such as DeepSpeed-Chat's names, or files/folders (repeat or comma-separate)")
	f.StringVar(&o.DataRevision, "data-revision", "", "Hub revision of the --data datasets named by Hub id (default main)")
	f.StringVar(&o.DataSplit, "data-split", "2,4,4", "proportions of the rows for steps 1, 2 and 3")
	f.IntVar(&o.MaxSeqLen, "max-seq-len", 512, "sequence length (longer is truncated)")
	f.IntVar(&o.TrainBatch, "per-device-train-batch-size", 16, "examples per micro-batch")
	f.IntVar(&o.EvalBatch, "per-device-eval-batch-size", 16, "examples per evaluation batch")
	f.Float64Var(&o.LR, "learning-rate", lr, "peak learning rate")
	f.Float64Var(&o.WeightDecay, "weight-decay", wd, "AdamW weight decay (not on biases and LayerNorm weights)")
	f.IntVar(&o.Epochs, "num-train-epochs", 1, "epochs")
	f.IntVar(&o.MaxSteps, "max-steps", 0, "total optimizer steps, overriding --num-train-epochs (0: epochs decide)")
	f.IntVar(&o.GradAccum, "gradient-accumulation-steps", 1, "micro-batches per optimizer step")
	f.IntVar(&o.ZeROStage, "zero-stage", 0, "ZeRO stage over MPI ranks: 0 replicates everything, 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters")
	o.offloadOptions.bind(f)
	f.StringVar(&o.Scheduler, "lr-scheduler-type", "cosine", "linear, cosine, cosine_with_restarts, polynomial, constant, constant_with_warmup")
	f.IntVar(&o.Warmup, "num-warmup-steps", 0, "linear warm-up steps")
	f.Uint64Var(&o.Seed, "seed", 1234, "seed of the data split, shuffling, dropout and initialisation")
	f.BoolVar(&o.GradCkpt, "gradient-checkpointing", false, "recompute each layer in the backward pass (less memory)")
	f.Float64Var(&o.Dropout, "dropout", -1, "dropout probability (-1: the model config's)")
	f.IntVar(&o.LoRADim, "lora-dim", 0, "LoRA rank (0: no LoRA)")
	f.StringVar(&o.LoRAModule, "lora-module-name", "", "LoRA applies to linear layers whose name contains this (default: every linear layer of the decoder layers)")
	f.BoolVar(&o.OnlyLoRA, "only-optimize-lora", false, "train only the LoRA weights (and the value head)")
	f.Float64Var(&o.LoRALR, "lora-learning-rate", 5e-4, "learning rate of the LoRA weights")
	f.Float64Var(&o.MaxGradNorm, "max-grad-norm", 1.0, "global gradient-norm clipping (0: off)")
	f.BoolVar(&o.AddEOT, "add-eot-token", false, "append EOS to step-1 sequences")
	f.StringVar(&o.OutputDir, "output-dir", "", "where the model, metrics and checkpoint go")
	f.IntVar(&o.EvalInterval, "eval-interval", 0, "evaluate every N optimizer steps (0: at the end only)")
	f.IntVar(&o.SaveInterval, "save-interval", 0, "checkpoint every N optimizer steps (0: every epoch)")
	f.BoolVar(&o.Resume, "resume", false, "continue the run in --output-dir from its checkpoint")
	f.BoolVar(&o.Overwrite, "overwrite", false, "replace a different run in --output-dir")
	f.BoolVar(&o.TensorBoard, "enable-tensorboard", false, "also write TensorBoard event files to OUTPUT/tensorboard")
	f.StringVar(&o.DataCache, "data-cache", "", "tokenized-data cache folder (default $GOCHAT_CACHE/data or ~/.cache/gochat/data; \"off\" disables)")
	f.BoolVar(&o.SkipMalformed, "skip-malformed", false, "drop (and count) malformed dataset rows instead of stopping")
	f.StringVar(&o.Adapter, "adapter", "", "read --data with this registered dataset's adapter")
	f.StringVar(&o.Columns.Prompt, "prompt-column", "prompt", "prompt column of generic Parquet/JSON/JSONL files")
	f.StringVar(&o.Columns.Chosen, "chosen-column", "chosen", "chosen-response column of generic files")
	f.StringVar(&o.Columns.Rejected, "rejected-column", "rejected", "rejected-response column of generic files")
	f.BoolVar(&o.SkipPreflight, "skip-preflight", false, skipPreflightHelp)
	bindChatTemplate(f, &o.ChatTemplate)
}

func (o *StageOptions) check(cmd *cobra.Command, runF func(*StageOptions) error) error {
	fs, estimate := cmd.Flags(), forEstimate(cmd)
	if err := flagsBelow(fs, flagMin{"max-seq-len", 2}, flagMin{"per-device-train-batch-size", 1},
		flagMin{"per-device-eval-batch-size", 1}, flagMin{"num-warmup-steps", 0}, flagMin{"save-interval", 0},
		flagMin{"eval-interval", 0}); err != nil {
		return err
	}
	if err := o.offloadOptions.check(fs); err != nil {
		return err
	}
	switch {
	case o.Model == "":
		return usageErrorf("--model is required")
	case len(o.Data) == 0 && !estimate:
		return usageErrorf("--data is empty")
	case o.OutputDir == "" && !estimate:
		return usageErrorf("--output-dir is required")
	case o.LoRADim < 0:
		return usageErrorf("--lora-dim must be >= 0")
	case o.OnlyLoRA && o.LoRADim == 0:
		return usageErrorf("--only-optimize-lora needs --lora-dim > 0")
	case o.Dropout >= 1 || (o.Dropout < 0 && o.Dropout != -1):
		return usageErrorf("--dropout must be in [0, 1) (or -1 for the model's)")
	case !(o.LR > 0):
		return usageErrorf("--learning-rate must be > 0")
	case zero.Stage(o.ZeROStage).Validate() != nil:
		return usageErrorf("--zero-stage %d: want 0, 1, 2 or 3", o.ZeROStage)
	}
	sp, err := checkScheduleAndSplit(o.Scheduler, o.DataSplit)
	if err != nil {
		return err
	}
	o.split = sp
	if o.Tokenizer == "" {
		o.Tokenizer = o.Model
	}
	if runF != nil {
		return runF(o)
	}
	defer o.g.watchSignals()()
	return runStage(context.Background(), o)
}

// flagMin is an integer flag's smallest valid value.
type flagMin struct {
	name string
	min  int
}

// flagsBelow returns a usage error naming the first integer flag below its
// minimum.
func flagsBelow(fs *pflag.FlagSet, mins ...flagMin) error {
	for _, m := range mins {
		if v, err := fs.GetInt(m.name); err == nil && v < m.min {
			return usageErrorf("--%s must be >= %d, got %d", m.name, m.min, v)
		}
	}
	return nil
}

// fingerprint identifies a run by the settings that change its result.
func (o *StageOptions) fingerprint() string { return fingerprintOf(o) }

// fingerprintOf hashes the JSON form of a command's options (fields tagged
// json:"-" are the ones that do not change the result).
func fingerprintOf(options any) string {
	b, _ := json.Marshal(options)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// writeFileAtomic writes b to path under a temporary name first.
func writeFileAtomic(path string, b []byte) error { return atomicfile.WriteFile(path, b) }

// runStage trains step 1 or 2 end to end, data-parallel over the ranks of
// an MPI job when mpirun started it (rank 0 writes the output directory).
func runStage(ctx context.Context, o *StageOptions) (err error) {
	start := time.Now()
	dev, end, err := stepDevice(o.g, o.dev, stepName(o.Step))
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
	resolve := func() (err error) {
		o.modelDir, o.tokDir, err = resolveModelTokenizer(o.g, o.Model, o.Tokenizer, o.Revision)
		return err
	}
	if err := resolveAndPreflight(o.g, o.Revision, resolve, func() error { return o.preflight(dev) }, [2]string{"--model", o.Model}); err != nil {
		return err
	}
	// The tokenizer and the chat template come first: the template is part
	// of the run's fingerprint.
	if err := o.loadTokenizer(); err != nil {
		return err
	}
	if o.chat != nil {
		log.Info().Str("chat_template", chatName(o.ChatTemplate, o.chat)).Msgf("step %d renders the data with the chat template", o.Step)
	}
	o.Ranks = ranks.comm.Size()
	o.GlobalBatch = o.TrainBatch * o.GradAccum * o.Ranks
	begin, release, err := ranks.claimRunDir(o.g, dev, o.OutputDir, o, &o.Resume, o.Overwrite)
	if err != nil {
		return err
	}
	defer release()
	vh := "no"
	if o.Step == 2 {
		vh = "yes"
	}
	// A value head the checkpoint lacks starts as nn.Linear's (model.Load's
	// rule, the same for the step-3 critic).
	dt, err := resolveDType(o.g, o.DType, dev)
	if err != nil {
		return err
	}
	m, err := model.Load(dev, o.modelDir, model.LoadOptions{ValueHead: vh, ValueHeadSeed: o.Seed, DType: dt})
	if err != nil {
		return err
	}
	if o.MaxSeqLen > m.Config.MaxPositions {
		return usageErrorf("--max-seq-len %d exceeds the model's max_position_embeddings %d", o.MaxSeqLen, m.Config.MaxPositions)
	}
	if o.Dropout >= 0 {
		m.Config.Dropout = o.Dropout
	}
	trainSet, evalSet, err := o.loadData(m)
	if err != nil {
		return err
	}
	var lo *lora.LoRA
	if o.LoRADim > 0 {
		if lo, err = lora.New(m, lora.Config{Dim: o.LoRADim, ModuleName: o.LoRAModule}, o.Seed); err != nil {
			return usageError{err}
		}
		m.SetAdapter(lo)
	}
	pad := int32(m.Config.PadTokenID)
	var st train.Stage
	if o.Step == 1 {
		st, err = sft.New(m, trainSet, evalSet, sft.Options{MaxSeqLen: o.MaxSeqLen, PAD: pad, ResponseOnly: o.LossOn == "response",
			EvalBatch: o.EvalBatch, Dropout: true, Checkpoint: o.GradCkpt})
	} else {
		st, err = reward.New(m, trainSet, evalSet, reward.Options{MaxSeqLen: o.MaxSeqLen, PAD: pad, EvalBatch: o.EvalBatch,
			Dropout: true, Checkpoint: o.GradCkpt})
	}
	if err != nil {
		return usageError{err}
	}
	tr, err := train.ModelTrainable(m, train.ParamOptions{LR: o.LR, WeightDecay: o.WeightDecay, LoRA: lo, LoRALR: o.LoRALR, OnlyLoRA: o.OnlyLoRA})
	if err != nil {
		return err
	}
	cfg := train.Config{TrainSize: len(trainSet.Examples), MicroBatch: o.TrainBatch, GradAccum: o.GradAccum,
		Epochs: o.Epochs, MaxSteps: o.MaxSteps, Schedule: o.Scheduler, Warmup: o.Warmup, ClipNorm: o.MaxGradNorm,
		AdamW: optim.DefaultAdamW, EvalEvery: o.EvalInterval, SaveEvery: o.SaveInterval, Seed: o.Seed,
		Dir: o.OutputDir, Fingerprint: o.fingerprint(), Resume: o.Resume, Log: log, Comm: ranks.comm, ZeRO: zero.Stage(o.ZeROStage), Stop: o.g.Stop}
	if o.g.LogFmt != "json" && isTerminal(o.g.Err) && ranks.writer() {
		cfg.Progress = o.g.Err
	}
	if cfg.Offload, err = o.offloadOptions.config(o.g, dev); err != nil {
		return err
	}
	// Everything is loaded and checked: the run starts here.
	if err := begin(); err != nil {
		return err
	}
	if o.TensorBoard && ranks.writer() {
		tb, err := train.NewTensorBoard(filepath.Join(o.OutputDir, "tensorboard"))
		if err != nil {
			return err
		}
		defer tb.Close()
		cfg.Events = tb
	}
	log.Info().Int("train_examples", cfg.TrainSize).Int("eval_examples", len(evalSet.Examples)).
		Int("steps", cfg.TotalSteps()).Int("params", m.NumParams()).Str("device", dev.Name()).
		Int("ranks", ranks.comm.Size()).Int("global_batch", o.TrainBatch*cfg.RoundBatches()).Msgf("step %d", o.Step)
	res, err := train.Run(ctx, dev, cfg, st, tr)
	if err != nil {
		return resumeHint(err, o.ranks != nil)
	}
	if !ranks.writer() {
		return nil
	}
	if err := o.saveModel(m, lo); err != nil {
		return err
	}
	if _, err := train.PlotMetrics(filepath.Join(o.OutputDir, train.MetricsFile), o.OutputDir); err != nil {
		log.Warn().Err(err).Msg("training curves not drawn")
	}
	ev := log.Info().Int("steps", res.Steps).Float64("first_loss", res.FirstLoss).Float64("last_loss", res.LastLoss).
		Str("elapsed", time.Since(start).Round(time.Second).String())
	for k, v := range res.Eval {
		ev = ev.Float64(k, v)
	}
	ev.Str("output", o.OutputDir).Msg("done")
	logMemory(o.g, dev, stepName(o.Step))
	return nil
}

// loadTokenizer loads the data tokenizer of --tokenizer (o.tokDir) and
// resolves --chat-template for it: what loadData and the run's
// fingerprint (the template's digest) need.
func (o *StageOptions) loadTokenizer() (err error) {
	if o.dtok, o.eos, o.pad, o.tokFP, err = loadDataTokenizer(o.tokDir, o.g.Threads); err != nil {
		return err
	}
	if o.chat, err = resolveChatTemplate(o.ChatTemplate, o.tokDir, o.dtok.t); err != nil {
		return err
	}
	if o.chat != nil {
		o.ChatDigest = o.chat.Digest()
	}
	return nil
}

// loadData builds the step's training and evaluation examples with the
// tokenizer loadTokenizer loaded.
func (o *StageOptions) loadData(m *model.Model) (trainSet, evalSet *data.Set, err error) {
	tok, eos, pad, fp := o.dtok, o.eos, o.pad, o.tokFP
	if int(eos) >= m.Config.VocabSize || int(pad) >= m.Config.VocabSize {
		return nil, nil, fmt.Errorf("tokenizer %s: special ids exceed the model's vocabulary (%d)", o.Tokenizer, m.Config.VocabSize)
	}
	dss, err := resolveData(o.Data, hubData(o.g, data.ResolveOptions{Adapter: o.Adapter, Columns: o.Columns}, o.DataRevision))
	if err != nil {
		return nil, nil, err
	}
	cache := dataCacheDir(o.DataCache)
	phase := data.PhaseSFT
	if o.Step == 2 {
		phase = data.PhaseReward
	}
	dopts := data.Options{Split: o.split, Seed: uint32(o.Seed), MaxSeqLen: o.MaxSeqLen, AddEOS: o.AddEOT,
		EndText: data.DefaultEndText, EOS: eos, PAD: pad, Tokenizer: tok, TokenizerID: fp, CacheDir: cache,
		SkipMalformed: o.SkipMalformed, Chat: o.chat}
	trainSet, evalSet, err = data.Load(dss, nil, phase, dopts)
	if err != nil {
		return nil, nil, err
	}
	lenFlag := fmt.Sprintf("--max-seq-len %d", o.MaxSeqLen)
	logDataStats(o.g, lenFlag, trainSet.Stats)
	logDataStats(o.g, lenFlag, evalSet.Stats)
	if o.chat != nil && o.LossOn == "response" {
		warnLastTurnOnly(o.g, chatName(o.ChatTemplate, o.chat), append(trainSet.Stats, evalSet.Stats...))
	}
	if len(trainSet.Examples) == 0 {
		if n := selectedRows(trainSet); n > 0 {
			return nil, nil, usageErrorf("the step-%d training split of --data %s is empty: all %d rows --data-split %s gives it were dropped (see the warnings)", o.Step, datasetNames(trainSet), n, o.DataSplit)
		}
		return nil, nil, usageErrorf("the step-%d training split is empty after --data-split %s; give this step a larger share or more data", o.Step, o.DataSplit)
	}
	if err := o.checkLearnable(trainSet, evalSet); err != nil {
		return nil, nil, err
	}
	return trainSet, evalSet, nil
}

// saveModel writes the trained model (LoRA fused in) and the tokenizer
// files to --output-dir.
func (o *StageOptions) saveModel(m *model.Model, lo *lora.LoRA) error {
	if err := saveModelDir(m, lo, nil, o.OutputDir, o.tokDir); err != nil {
		return err
	}
	return saveChatTemplate(o.OutputDir, o.ChatTemplate, o.chat)
}

// saveModelDir writes m as a Hugging Face directory with the tokenizer files
// of tokDir. With adapters, their term is fused into a copy of the weights
// first (loraParams, when given, replaces the adapters' own weights for the
// fusion: the actor EMA's); m and lo are unchanged afterwards.
func saveModelDir(m *model.Model, lo *lora.LoRA, loraParams kernels.Buffer, dir, tokDir string) error {
	if lo != nil {
		base, err := m.Dev.Alloc(m.DType(), m.NumParams())
		if err != nil {
			return fmt.Errorf("saving %s: a copy of the weights to fuse LoRA into: %w", dir, err)
		}
		defer m.Dev.Free(base)
		m.Dev.Copy(base, m.Params.Flat)
		defer m.Dev.Copy(m.Params.Flat, base)
		if loraParams != nil {
			own, err := m.Dev.Alloc(kernels.F32, lo.Params.Len())
			if err != nil {
				return fmt.Errorf("saving %s: %w", dir, err)
			}
			defer m.Dev.Free(own)
			m.Dev.Copy(own, lo.Params)
			m.Dev.Copy(lo.Params, loraParams)
			defer m.Dev.Copy(lo.Params, own)
		}
		if err := lo.Fuse(m.Params.Flat); err != nil {
			return fmt.Errorf("saving %s: %w", dir, err)
		}
	}
	if err := m.Save(dir, model.SaveOptions{}); err != nil {
		return err
	}
	return copyTokenizerFiles(tokDir, dir)
}

// copyTokenizerFiles copies the Hugging Face tokenizer files that exist in
// src to dst.
func copyTokenizerFiles(src, dst string) error {
	// generation_config.json holds the eos ids generation stops at (a list
	// for Llama-3-Instruct): a saved model keeps them.
	for _, name := range append(tokenizerFiles[:len(tokenizerFiles):len(tokenizerFiles)], "generation_config.json") {
		in, err := os.Open(filepath.Join(src, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("copy tokenizer: %w", err)
		}
		b, err := io.ReadAll(in)
		in.Close()
		if err != nil {
			return fmt.Errorf("copy tokenizer: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(dst, name), b); err != nil {
			return err
		}
	}
	return nil
}

// resolveData finds every --data dataset.
func resolveData(names []string, ro data.ResolveOptions) ([]*data.Dataset, error) {
	var dss []*data.Dataset
	for _, name := range names {
		ds, err := data.Resolve(name, ro)
		if err != nil {
			return nil, err
		}
		dss = append(dss, ds)
	}
	return dss, nil
}

// dataCacheDir resolves --data-cache: "" is the default folder, "off" none.
func dataCacheDir(flag string) string {
	switch flag {
	case "":
		return data.DefaultCacheDir(os.Getenv)
	case "off":
		return ""
	}
	return flag
}

// checkScheduleAndSplit validates --lr-scheduler-type and parses
// --data-split (three proportions, one per step).
func checkScheduleAndSplit(schedule, split string) (data.Split, error) {
	if _, err := optim.NewSchedule(schedule, 0, 1); err != nil {
		return nil, usageErrorf("--lr-scheduler-type: %v", err)
	}
	sp, err := data.ParseSplit(split)
	switch {
	case err != nil && strings.Count(split, ",") == 2:
		return nil, usageErrorf("--data-split: %v (want three proportions like 2,4,4, not all zero)", err)
	case err != nil || len(sp) != 3:
		return nil, usageErrorf("--data-split %q: want three proportions like 2,4,4", split)
	}
	return sp, nil
}
