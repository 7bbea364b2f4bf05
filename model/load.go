package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/tensor"
)

// decoderPrefixes are the prefixes of decoder weights in the Hugging Face
// layouts gochat reads: OPTForCausalLM, OPTModel, and DeepSpeed-Chat's
// reward/critic model.
var decoderPrefixes = []string{"model.decoder.", "decoder.", "rwtransformer.decoder."}

// llamaPrefixes are the LLaMA family's: XForCausalLM and
// XForSequenceClassification ("model."), DeepSpeed-Chat's reward/critic
// model ("rwtransformer.", over XModel), and XModel itself (no prefix).
var llamaPrefixes = []string{"model.", "rwtransformer."}

// scoreName is the value head's name in transformers'
// XForSequenceClassification checkpoints (num_labels 1), which both
// families save and read; DeepSpeed-Chat's v_head.weight is read too.
const scoreName = "score.weight"

// hasValueHead reports whether a checkpoint holds a value head.
func hasValueHead(ck *tensor.Checkpoint) bool {
	for _, n := range []string{"v_head.weight", scoreName} {
		if _, ok := ck.Info(n); ok {
			return true
		}
	}
	return false
}

// LoadOptions configure Load.
type LoadOptions struct {
	// ValueHead: "auto" (or "") adds a value head when the checkpoint has
	// v_head.weight; "yes" always adds one (initialised by InitValueHead
	// from ValueHeadSeed when the file has none: see SavedValueHead);
	// "require" loads the checkpoint's and fails with
	// ErrNoValueHead when it has none (a reward model that scores);
	// "no" never adds one (a v_head in the file is ignored).
	ValueHead string
	// ValueHeadSeed seeds the initialisation of a value head that Load adds
	// and the checkpoint does not have (every value, 0 included, is a seed).
	ValueHeadSeed uint64
	// DType is the parameters' element type (Options.DType): F32 (default)
	// or BF16, whatever the file holds (values are rounded to nearest even).
	DType kernels.DType
}

// ErrNoValueHead is Load's error for a checkpoint without v_head.weight
// under ValueHead "require".
var ErrNoValueHead = errors.New("no value head (v_head.weight)")

// Load reads a Hugging Face model directory (config.json and any weight
// layout tensor.OpenDir understands) onto dev.
func Load(dev kernels.Device, dir string, opts LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	ck, err := tensor.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	hasVHead := hasValueHead(ck)
	vh := false
	switch opts.ValueHead {
	case "", "auto":
		vh = hasVHead
	case "yes":
		vh = true
	case "require":
		if !hasVHead {
			return nil, fmt.Errorf("%s: %w", dir, ErrNoValueHead)
		}
		vh = true
	case "no":
	default:
		return nil, fmt.Errorf("model: ValueHead option %q: want auto, yes, require or no", opts.ValueHead)
	}
	m, err := New(dev, cfg, Options{ValueHead: vh, DType: opts.DType})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	fresh := vh && !hasVHead
	if err := m.LoadWeights(ck, fresh); err != nil {
		m.Free()
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	if fresh {
		m.InitValueHead(opts.ValueHeadSeed)
	}
	return m, nil
}

// SavedValueHead reports whether the model directory dir holds a value
// head (v_head.weight, or score.weight as transformers'
// XForSequenceClassification saves it), that is whether Load with ValueHead "yes" would
// load a trained one rather than initialise a fresh one. It reads only the
// checkpoint's index, not the weights.
func SavedValueHead(dir string) (bool, error) {
	ck, err := tensor.OpenDir(dir)
	if err != nil {
		return false, err
	}
	defer ck.Close()
	return hasValueHead(ck), nil
}

// vheadStream is the second word of the PCG state that InitValueHead seeds
// ("vhea"), fixed so that a seed gives the same head in every release.
const vheadStream = 0x76686561

// InitValueHead sets the value head to nn.Linear(P, 1, bias=False)'s default
// initialisation, deterministically from seed: v_head[i] = (2u−1)/√P with
// u = rand.New(rand.NewPCG(seed, 0x76686561)).Float64() drawn in order, i.e.
// U(−1/√P, 1/√P) (kaiming_uniform with a=√5 reduces to that bound). Load
// uses it for a value head the checkpoint does not have (LoadOptions
// ValueHead "yes"), so the critic of step 3 starts as the reward model of
// step 2 does: with a zero head no gradient would reach the body at first.
// It does nothing on a model without a value head.
func (m *Model) InitValueHead(seed uint64) {
	if m.Params.VHead == nil {
		return
	}
	h := make([]float32, m.Params.VHead.Len())
	rng := rand.New(rand.NewPCG(seed, vheadStream))
	b := 1 / math.Sqrt(float64(len(h)))
	for i := range h {
		h[i] = float32((rng.Float64()*2 - 1) * b)
	}
	m.Dev.WriteF32(m.Params.VHead, h)
}

// shortName maps a checkpoint tensor name to the model's short name, or ""
// for names the model ignores.
func (m *Model) shortName(name string) string {
	if strings.HasSuffix(name, ".version") {
		return "" // fairseq bookkeeping
	}
	if name == "lm_head.weight" || name == "v_head.weight" {
		return name
	}
	if name == scoreName {
		return "v_head.weight"
	}
	prefixes := decoderPrefixes
	if m.Config.IsLlamaFamily() {
		if strings.HasSuffix(name, "rotary_emb.inv_freq") {
			return "" // a non-persistent buffer some old conversions kept
		}
		prefixes = llamaPrefixes
	}
	for _, p := range prefixes {
		if s, ok := strings.CutPrefix(name, p); ok {
			return s
		}
	}
	return name
}

// LoadWeights copies every parameter from ck, checking names and shapes
// against the config. A tied lm_head in the file is ignored (the embedding
// is used, as transformers does). allowMissingVHead lets a freshly added
// value head be absent from ck (its weights are left as they are; Load
// then initialises them with InitValueHead).
func (m *Model) LoadWeights(ck *tensor.Checkpoint, allowMissingVHead bool) error {
	want := map[string]paramSpec{}
	for _, s := range m.specs {
		want[s.name] = s
	}
	found := map[string]string{} // short name -> file name
	var unknown []string
	for _, name := range ck.Names() {
		short := m.shortName(name)
		if short == "" || (short == "lm_head.weight" && m.Config.TieWordEmbeddings) || (short == "v_head.weight" && !m.opts.ValueHead) {
			continue
		}
		s, ok := want[short]
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		if prev, dup := found[short]; dup {
			return fmt.Errorf("tensor %q appears twice (as %q and %q)", short, prev, name)
		}
		found[short] = name
		info, _ := ck.Info(name)
		if !slices.Equal(info.Shape, s.shape) {
			return fmt.Errorf("tensor %q in %s has shape %v, but config.json implies %v", name, info.File, info.Shape, s.shape)
		}
	}
	if len(unknown) > 0 {
		kind := "OPT"
		if m.Config.IsLlamaFamily() {
			kind = m.Config.ModelType
		}
		return fmt.Errorf("%d tensors are not part of this %s model (%s); is config.json the right one?", len(unknown), kind, listSome(unknown))
	}
	// An XForSequenceClassification checkpoint (a reward model as TRL and
	// OpenRLHF publish them) has score.weight and no lm_head: an untied
	// lm_head is then left as it is (zero from New), unused by a model that
	// only scores.
	_, hasScore := found["v_head.weight"]
	var missing []string
	for _, s := range m.specs {
		if _, ok := found[s.name]; !ok && !(s.name == "v_head.weight" && allowMissingVHead) &&
			!(s.name == "lm_head.weight" && hasScore && m.Config.IsLlamaFamily()) {
			missing = append(missing, s.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d tensors are missing from the checkpoint (%s)", len(missing), listSome(missing))
	}
	var host []float32
	for _, s := range m.specs {
		name, ok := found[s.name]
		if !ok {
			continue
		}
		host = slices.Grow(host[:0], s.size())[:s.size()]
		if err := ck.ReadF32(name, host); err != nil {
			return err
		}
		m.Dev.WriteF32(m.Params.Flat.Slice(s.offset, s.size()), host)
	}
	return nil
}

func listSome(names []string) string {
	const k = 5
	if len(names) <= k {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:k], ", ") + fmt.Sprintf(", and %d more", len(names)-k)
}

// SaveOptions configure Save.
type SaveOptions struct {
	// Prefix is put before decoder weight names: by default the family's
	// (Config.HFPrefix: "model.decoder." for OPT, "model." for the LLaMA
	// family, what XForCausalLM.from_pretrained reads), or e.g.
	// "rwtransformer.decoder." (DeepSpeed-Chat's reward model: a prefix
	// starting "rwtransformer." writes the value head as DeepSpeed-Chat
	// does, v_head.weight, under architectures XForCausalLM).
	Prefix string
	// DType of the written tensors: tensor.F32, F16 or BF16; the default
	// is the parameters' own (BF16 for a bf16 model, else F32).
	DType tensor.DType
}

// Save writes the model as a Hugging Face directory: config.json and
// model.safetensors (written to temporary names and renamed). The tied
// lm_head is not written, as transformers does, nor an untied one beside a
// value head. A value head is written as
// score.weight ([1,P] for OPT, [1,H] for the LLaMA family) with
// architectures XForSequenceClassification and num_labels 1 in
// config.json, so that transformers' AutoModelForSequenceClassification
// loads a reward model or critic and scores as gochat does (the last
// token's value); without one, architectures is XForCausalLM.
func (m *Model) Save(dir string, opts SaveOptions) error {
	if opts.Prefix == "" {
		opts.Prefix = m.Config.HFPrefix()
	}
	llama := m.Config.IsLlamaFamily()
	dsChat := strings.HasPrefix(opts.Prefix, "rwtransformer.")
	vhead := scoreName
	if dsChat {
		vhead = "v_head.weight"
	}
	if opts.DType == "" {
		opts.DType = tensor.F32
		if m.DType() == kernels.BF16 {
			opts.DType = tensor.BF16
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	ts := make([]tensor.WriteTensor, 0, len(m.specs))
	for _, s := range m.specs {
		name := s.name
		if name == "lm_head.weight" && m.HasValueHead() {
			// XForSequenceClassification has no lm_head (nor has
			// DeepSpeed-Chat's reward model): a model that scores does
			// not write the untied output layer it never uses.
			continue
		}
		switch {
		case name == "v_head.weight":
			name = vhead
		case name != "lm_head.weight" && name != "v_head.weight":
			name = opts.Prefix + name
		}
		view := m.Params.Flat.Slice(s.offset, s.size())
		ts = append(ts, tensor.WriteTensor{Name: name, DType: opts.DType, Shape: s.shape,
			Read: func(off int, dst []float32) { m.Dev.ReadF32(dst, view.Slice(off, len(dst))) }})
	}
	if err := tensor.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := *m.Config
	cfg.TorchDtype = map[tensor.DType]string{tensor.F32: "float32", tensor.F16: "float16", tensor.BF16: "bfloat16"}[opts.DType]
	cfg.raw = maps.Clone(cfg.raw)
	if cfg.raw == nil {
		cfg.raw = map[string]json.RawMessage{}
	}
	family := "OPT"
	if llama {
		family = llamaArchitectures[cfg.ModelType]
	}
	arch := family + "ForCausalLM"
	for _, k := range []string{"num_labels", "id2label", "label2id"} {
		delete(cfg.raw, k)
	}
	if m.HasValueHead() && !dsChat {
		arch = family + "ForSequenceClassification"
		cfg.raw["num_labels"] = json.RawMessage(`1`)
		cfg.raw["id2label"] = json.RawMessage(`{"0": "LABEL_0"}`)
		cfg.raw["label2id"] = json.RawMessage(`{"LABEL_0": 0}`)
	}
	cfg.raw["architectures"] = json.RawMessage(`["` + arch + `"]`)
	return cfg.Save(dir)
}
