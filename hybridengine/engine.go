// Package hybridengine is the actor engine of PPO (DESIGN.md §4): one model
// that switches explicitly between two modes.
//
//   - Train mode: the model as training sees it, with its LoRA adapters
//     attached (unfused), optionally with gradient checkpointing. Model and
//     TrainActs are available only here.
//   - Generate mode: entered by EnterGenerate or by the first Generate. With
//     LoRA, the base parameters are copied into a separate inference
//     workspace and every adapter's W + scaling·leftᵀ·rightᵀ is written
//     there; decoding runs on that workspace with no adapter, so the base
//     weights are never modified. Without LoRA the base weights are used as
//     they are. Generate decodes batches of left-padded prompts with a KV
//     cache sized for the batch. InferenceModel is available only here.
//
// Train leaves Generate mode and releases the workspace and the KV cache,
// or keeps them for the next Generate mode with Options.KeepInferenceCache
// (--keep-inference-cache); the workspace is re-fused on every entry into
// Generate mode because training changes the weights.
//
// Invariants (tested): Generate-mode logits equal Train-mode logits (exactly
// without LoRA, up to float32 rounding with it); the base weights are
// bit-identical after Generate; KV-cache decoding equals the full forward at
// every real position; a row's continuation depends only on its prompt, its
// row index and the seed, not on the other rows of its batch or on its left
// padding.
package hybridengine

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
)

// Mode is the state of an Engine.
type Mode int

// The two modes.
const (
	TrainMode Mode = iota
	GenerateMode
)

func (m Mode) String() string {
	switch m {
	case TrainMode:
		return "train"
	case GenerateMode:
		return "generate"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configure an Engine.
type Options struct {
	// MaxAnswerLen is the most tokens generated per prompt
	// (--max-answer-seq-len).
	MaxAnswerLen int
	// Sample chooses greedy or sampled decoding. Sample.Seed and a row's
	// index (Prompts.Rows) key the row's own random stream.
	Sample model.SampleOptions
	// IgnoreEOS keeps generating after EOS (benchmarks); normally a row
	// stops at EOS.
	IgnoreEOS bool
	// StopIDs are more ids that end a row as EOS does (the tokenizer's
	// other end-of-sequence ids, a chat template's end-of-turn token such
	// as <|im_end|>); the stop token is part of the answer, as EOS is.
	StopIDs []int32
	// KeepInferenceCache keeps the inference workspace and the KV cache
	// across Train (--keep-inference-cache): faster mode switches, more
	// memory held during training.
	KeepInferenceCache bool
	// GradientCheckpointing makes TrainActs recompute each layer in the
	// backward pass (--actor-gradient-checkpointing).
	GradientCheckpointing bool
}

// Model is what an Engine uses of its actor, a model of type M: its
// configuration, device and flat parameters, the LoRA adapter slot,
// training activations, and, in Generate mode, a view of itself over the
// inference workspace (WithParams, an M too) that decodes with a KV cache.
// *model.Model implements Model[*model.Model].
type Model[M any] interface {
	ModelConfig() *model.Config
	Device() kernels.Device
	// DType, NumParams and Parameters().Flat are the flat parameter
	// buffer the inference workspace copies.
	DType() kernels.DType
	NumParams() int
	Parameters() *model.Params
	SetAdapter(a model.Adapter)
	NewActs(b, t int, opts model.ActsOptions) (*model.Acts, error)
	// WithParams is a view of the model over flat (NumParams elements of
	// DType on Device) with no adapter, leaving the model unchanged.
	WithParams(flat kernels.Buffer) M
	NewCache(b, tmax, maxChunk int) (*model.Cache, error)
	Decode(kc *model.Cache, ids, mask []int32, tn int, out model.DecodeOutput) ([]float32, error)
}

var _ Model[*model.Model] = (*model.Model)(nil)

// Engine is the actor of PPO, a model of type M, in Train or Generate mode.
// Model and InferenceModel hand out M itself, so a caller keeps the
// model's full type (Engine[*model.Model]). It is not safe for concurrent
// use.
type Engine[M Model[M]] struct {
	m    M
	lo   *lora.LoRA
	opts Options
	mode Mode

	ws  kernels.Buffer // inference workspace (base + fused LoRA); nil without LoRA
	inf M              // Generate-mode model: a view over ws, or m without LoRA; zero in Train mode
	kc  *model.Cache
}

// New returns an engine in Train mode for m and its adapters lo (nil: no
// LoRA). It attaches lo to m as m's adapter (detaching any other).
func New[M Model[M]](m M, lo *lora.LoRA, opts Options) (*Engine[M], error) {
	if opts.MaxAnswerLen < 1 {
		return nil, fmt.Errorf("hybridengine: max answer length must be >= 1, got %d", opts.MaxAnswerLen)
	}
	if c := m.ModelConfig(); opts.MaxAnswerLen >= c.MaxPositions {
		return nil, fmt.Errorf("hybridengine: max answer length %d leaves no room for a prompt in max_position_embeddings %d", opts.MaxAnswerLen, c.MaxPositions)
	}
	if err := opts.Sample.Validate(); err != nil {
		return nil, fmt.Errorf("hybridengine: %w", err)
	}
	if lo != nil { // not SetAdapter(lo) for both: a nil *LoRA is a non-nil Adapter
		m.SetAdapter(lo)
	} else {
		m.SetAdapter(nil)
	}
	return &Engine[M]{m: m, lo: lo, opts: opts}, nil
}

// GenerateBytes is what an engine for a model with config c and
// parameters of type dt holds in Generate mode for batches of b prompts of
// promptLen tokens: the inference workspace (with LoRA, a copy of the
// parameters in their type; nil without) and the KV cache (prompt plus
// maxAnswer positions, prefilled in one chunk).
func GenerateBytes(c *model.Config, valueHead bool, dt kernels.DType, withLoRA bool, b, promptLen, maxAnswer int) (workspace, cache int) {
	if withLoRA {
		workspace = model.ParamCount(c, valueHead) * dt.Size()
	}
	return workspace, model.CacheBytes(c, b, promptLen+maxAnswer, promptLen)
}

// Mode reports the current mode.
func (e *Engine[M]) Mode() Mode { return e.mode }

// Options returns the engine's options.
func (e *Engine[M]) Options() Options { return e.opts }

// Model returns the Train-mode model (with the LoRA adapters attached) for
// forward and backward passes and optimizer steps. It is an error in
// Generate mode.
func (e *Engine[M]) Model() (M, error) {
	if err := e.want(TrainMode, "Model"); err != nil {
		var zero M
		return zero, err
	}
	return e.m, nil
}

// TrainActs allocates activation buffers for training on [b,t] batches:
// opts with Train set, and Checkpoint set when the engine uses gradient
// checkpointing. It is an error in Generate mode.
func (e *Engine[M]) TrainActs(b, t int, opts model.ActsOptions) (*model.Acts, error) {
	opts, err := e.TrainActsOptions(opts)
	if err != nil {
		return nil, err
	}
	return e.m.NewActs(b, t, opts)
}

// TrainActsOptions returns opts as TrainActs uses them (Train set,
// Checkpoint set when the engine uses gradient checkpointing), for callers
// that reuse activation buffers (model.ReuseActs). It is an error in
// Generate mode.
func (e *Engine[M]) TrainActsOptions(opts model.ActsOptions) (model.ActsOptions, error) {
	if err := e.want(TrainMode, "TrainActs"); err != nil {
		return opts, err
	}
	opts.Train = true
	opts.Checkpoint = opts.Checkpoint || e.opts.GradientCheckpointing
	return opts, nil
}

// InferenceModel returns the Generate-mode model: the fused workspace with
// no adapter (the base model itself without LoRA). Use it for passes that
// need no gradients while in Generate mode; it must not be trained. It is
// an error in Train mode.
func (e *Engine[M]) InferenceModel() (M, error) {
	if err := e.want(GenerateMode, "InferenceModel"); err != nil {
		var zero M
		return zero, err
	}
	return e.inf, nil
}

func (e *Engine[M]) want(m Mode, op string) error {
	if e.mode != m {
		return fmt.Errorf("hybridengine: %s needs %s mode; the engine is in %s mode", op, m, e.mode)
	}
	return nil
}

// EnterGenerate switches to Generate mode: with LoRA it copies the base
// parameters into the inference workspace (allocated unless kept, in the
// parameters' dtype: bf16 in mixed precision, never an fp32 copy) and fuses
// the adapters there. It does nothing in Generate mode.
func (e *Engine[M]) EnterGenerate() error {
	if e.mode == GenerateMode {
		return nil
	}
	if e.lo == nil {
		e.inf = e.m
	} else {
		d := e.m.Device()
		if e.ws == nil {
			ws, err := d.Alloc(e.m.DType(), e.m.NumParams())
			if err != nil {
				return fmt.Errorf("hybridengine: inference workspace: %w", err)
			}
			e.ws, e.inf = ws, e.m.WithParams(ws)
		}
		d.Copy(e.ws, e.m.Parameters().Flat)
		if err := e.lo.Fuse(e.ws); err != nil {
			return fmt.Errorf("hybridengine: %w", err)
		}
		if err := d.Sync(); err != nil {
			return fmt.Errorf("hybridengine: fusing LoRA into the inference workspace: %w", err)
		}
	}
	e.mode = GenerateMode
	return nil
}

// Train switches to Train mode, releasing the inference workspace and the
// KV cache unless Options.KeepInferenceCache is set. It does nothing in
// Train mode.
func (e *Engine[M]) Train() {
	if e.mode == TrainMode {
		return
	}
	if !e.opts.KeepInferenceCache {
		if e.ws != nil {
			e.m.Device().Free(e.ws)
		}
		e.kc.Free()
		var none M
		e.ws, e.inf, e.kc = nil, none, nil
		if t, ok := e.m.Device().(trimmer); ok {
			t.Trim()
		}
	}
	e.mode = TrainMode
}

// trimmer is a device that returns freed memory to the operating system on
// request (the CPU device: its buffers are garbage-collected memory).
type trimmer interface{ Trim() }

// cache returns a reset KV cache for b rows of up to tmax positions with
// prefill chunks of chunk positions, reusing the engine's when it fits.
func (e *Engine[M]) cache(b, tmax, chunk int) (*model.Cache, error) {
	if kc := e.kc; kc != nil && kc.B == b && kc.Tmax >= tmax && kc.MaxChunk >= chunk {
		kc.Reset()
		return kc, nil
	}
	e.kc.Free() // let the old one go before allocating the new one
	e.kc = nil
	kc, err := e.inf.NewCache(b, tmax, chunk)
	if err != nil {
		return nil, fmt.Errorf("hybridengine: %w", err)
	}
	e.kc = kc
	return kc, nil
}
