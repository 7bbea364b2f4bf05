package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/tensor"
)

// The golden files under testdata/llama are written by
// scripts/llama_golden.py: a float64 PyTorch re-implementation of
// transformers' Llama, Qwen2 and Qwen3 forward passes, from the same
// float32 weights (saved under transformers' names). The cases:
//
//	llama  GQA (4 heads, 2 KV heads), llama3 rope scaling, untied lm_head,
//	       attention_bias (q/k/v/o) and mlp_bias, eos_token_id a list
//	qwen2  q/k/v biases without o_proj's, one KV head, tied, a value head
//	       saved as score.weight (Qwen2ForSequenceClassification), no pad_token_id
//	qwen3  q_norm/k_norm, head_dim 16 != hidden/heads 8, tied
var llamaCases = []string{"llama", "qwen2", "qwen3"}

func loadLlama(t testing.TB, name string, opts LoadOptions) *Model {
	t.Helper()
	m, err := Load(newCPU(t, 2), filepath.Join("testdata", "llama", name), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLlamaGoldenPyTorch(t *testing.T) {
	for _, name := range llamaCases {
		for _, side := range []string{"left", "right"} {
			t.Run(name+"/"+side, func(t *testing.T) { checkLlamaGolden(t, newCPU(t, 2), name, side, cpuTol) })
		}
	}
}

// checkLlamaGolden is checkOPTGolden for the LLaMA-family cases of
// testdata/llama: logits, loss, values, every gradient (with and without
// gradient checkpointing), then ten steps of optim.AdamW.
func checkLlamaGolden(t *testing.T, dev kernels.Device, name, side string, tol goldenTol) {
	m, err := Load(dev, filepath.Join("testdata", "llama", name), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := openGolden(t, filepath.Join("testdata", "llama", name, side+".safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	targets, _ := g.i32("targets")
	B, T := shape[0], shape[1]
	batch := Batch{IDs: ids, Mask: mask, Targets: targets}
	if m.HasValueHead() != g.has("values") {
		t.Fatalf("value head %v, golden values %v", m.HasValueHead(), g.has("values"))
	}
	for _, ckpt := range []bool{false, true} {
		a := goldenForwardBackward(t, m, g, batch, B, T, ckpt, tol)
		checkLlamaGrads(t, m, g, fmt.Sprintf("checkpoint=%v", ckpt), tol)
		a.Free()
	}
	checkLlamaAdamW(t, m, g, batch, B, T, tol)
}

// checkLlamaGrads compares every parameter gradient with PyTorch's, each
// relative to the largest gradient of its tensor, floored at 1e-3 of the
// largest in the model (for tensors whose gradient is all rounding noise).
func checkLlamaGrads(t *testing.T, m *Model, g *goldenFile, what string, tol goldenTol) {
	t.Helper()
	global := goldenGradMax(m, g)
	for _, name := range m.ParamNames() {
		view := must(m.ParamView(m.Grads, name))
		got := make([]float32, view.Len())
		m.Dev.ReadF32(got, view)
		want := g.f32("grad." + name)
		if !slices.ContainsFunc(want, func(x float32) bool { return x != 0 }) && name != "v_head.weight" {
			t.Errorf("%s: PyTorch's gradient of %s is zero: the test would not see it", what, name)
		}
		checkClose(t, what+" grad "+name, got, want, 1e-4*tol.fp32, 1e-3*global)
	}
}

// checkLlamaAdamW runs ten steps of gochat's optim.AdamW (weight decay 0.1
// except for optim.NoDecay names, as the script's torch.optim.AdamW groups)
// on the mean loss: the loss trajectory matches PyTorch's.
func checkLlamaAdamW(t *testing.T, m *Model, g *goldenFile, batch Batch, B, T int, tol goldenTol) {
	t.Helper()
	var decay, noDecay optim.Group
	decay.WeightDecay, decay.LR, noDecay.LR = 0.1, 1e-3, 1e-3
	for _, name := range m.ParamNames() {
		seg := optim.Segment{Name: name, Params: must(m.ParamView(m.Params, name)), Grads: must(m.ParamView(m.Grads, name))}
		if optim.NoDecay(name) {
			noDecay.Segments = append(noDecay.Segments, seg)
		} else {
			decay.Segments = append(decay.Segments, seg)
		}
	}
	if len(noDecay.Segments) == 0 || len(decay.Segments) == 0 {
		t.Fatal("both parameter groups must be used")
	}
	opt := must(optim.NewAdamW(m.Dev, []optim.Group{decay, noDecay}, optim.DefaultAdamW))
	defer opt.Free()
	a := must(m.NewActs(B, T, ActsOptions{Train: true}))
	defer a.Free()
	want := g.f32("adamw_losses")
	got := make([]float32, len(want))
	for step := range want {
		if err := m.Forward(a, batch); err != nil {
			t.Fatal(err)
		}
		got[step], _, _ = m.MeanLoss(a)
		m.ZeroGrads()
		if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
			t.Fatal(err)
		}
		opt.Step(1, 1)
	}
	for i := range want {
		checkClose(t, fmt.Sprintf("AdamW loss at step %d", i+1), got[i:i+1], want[i:i+1], 1e-5*tol.fp32, 0)
	}
	if !(got[len(got)-1] < got[0]-0.5) {
		t.Errorf("AdamW did not lower the loss: %v", got)
	}
}

// TestLlamaDecodeMatchesForward: decoding with the KV cache (one position
// at a time, and a prefill then single steps) gives the full forward's
// logits at every real position, on left-padded rows.
func TestLlamaDecodeMatchesForward(t *testing.T) {
	for _, name := range llamaCases {
		t.Run(name, func(t *testing.T) {
			m := loadLlama(t, name, LoadOptions{})
			rng := rand.New(rand.NewPCG(1, 2))
			const B, T = 3, 10
			ids, mask := leftPadded(rng, m, T, []int{0, 3, 9})
			full := forwardLogits(t, m, ids, mask, B, T)
			V := m.Config.VocabSize
			cols := func(src []int32, j, n int) []int32 {
				out := make([]int32, 0, B*n)
				for b := range B {
					out = append(out, src[b*T+j:b*T+j+n]...)
				}
				return out
			}
			for _, prefill := range []int{1, 6, T} {
				kc := must(m.NewCache(B, T, prefill))
				for pos := 0; pos < T; {
					n := 1
					if pos == 0 {
						n = prefill
					}
					got, err := m.Decode(kc, cols(ids, pos, n), cols(mask, pos, n), n, AllLogits)
					if err != nil {
						t.Fatal(err)
					}
					for b := range B {
						for j := range n {
							if mask[b*T+pos+j] == 0 {
								continue // a padding query: only real positions are comparable
							}
							at := (b*T + pos + j) * V
							checkClose(t, fmt.Sprintf("prefill %d: decode logits of row %d at %d", prefill, b, pos+j),
								got[(b*n+j)*V:(b*n+j+1)*V], full[at:at+V], 1e-5, 0)
						}
					}
					pos += n
				}
				kc.Free()
			}
		})
	}
}

// TestLlamaGenerateGreedy: Generate's greedy tokens from left-padded prompts
// are those of the script's loop, which recomputes the full forward (no
// cache) every step; rows stop at an EOS id.
func TestLlamaGenerateGreedy(t *testing.T) {
	for _, name := range llamaCases {
		t.Run(name, func(t *testing.T) {
			m := loadLlama(t, name, LoadOptions{})
			g := openGolden(t, filepath.Join("testdata", "llama", name, "generate.safetensors"))
			ids, shape := g.i32("gen_ids")
			mask, _ := g.i32("gen_mask")
			want, wshape := g.i32("gen_tokens")
			B, T0, nNew := shape[0], shape[1], wshape[1]
			prompts := make([][]int32, B)
			for b := range B {
				for j := range T0 {
					if mask[b*T0+j] == 1 {
						prompts[b] = append(prompts[b], ids[b*T0+j])
					}
				}
			}
			s := must(NewSampler(SampleOptions{Greedy: true}))
			gens, err := m.Generate(prompts, nNew, s)
			if err != nil {
				t.Fatal(err)
			}
			for b, gen := range gens {
				w := want[b*nNew : (b+1)*nNew]
				if i := slices.Index(w, -1); i >= 0 {
					w = w[:i]
				}
				if !slices.Equal(gen.Tokens, w) {
					t.Errorf("row %d: greedy tokens %v, PyTorch %v", b, gen.Tokens, w)
				}
			}
		})
	}
}

// TestLlamaBF16MatchesPyTorchAutocast is TestBF16MatchesPyTorchAutocast and
// TestBF16Gradients for the LLaMA family: bf16 weights against PyTorch's
// autocast and the exact answer of the same bf16 weights.
func TestLlamaBF16MatchesPyTorchAutocast(t *testing.T) {
	for _, name := range llamaCases {
		for _, isa := range []string{"", "generic"} {
			t.Run(name+"/"+cmpOr(isa, "best"), func(t *testing.T) {
				checkLlamaBF16(t, must(cpu.New(cpu.Options{Threads: 2, ISA: isa})), name, cpuTol)
			})
		}
	}
}

// checkLlamaBF16 runs the LLaMA-family case name with bf16 weights on dev:
// logits and loss against PyTorch's autocast, logits and gradients against
// the exact answer of the same weights, next to autocast's own errors.
func checkLlamaBF16(t *testing.T, dev kernels.Device, name string, tol goldenTol) {
	dir := filepath.Join("testdata", "llama", name)
	m, g, a := bf16GoldenForward(t, dev, dir, true)
	checkBF16LogitsLoss(t, m, g, a, 3e-2*tol.bf16Logits, tol)
	grad := m.MeanLossGrad(a)
	if g.has("dvalues") {
		grad.DValues = g.f32("dvalues")
	}
	goldenBackward(t, m, a, grad)
	og, tg := bf16GradErrors(m, g)
	t.Logf("relative L2 gradient error vs exact: gochat bf16 %.3g, torch autocast %.3g", og, tg)
	if og > tol.bf16GradRatio*tg+tol.bf16GradAbs {
		t.Errorf("gradient error %.3g, PyTorch autocast's %.3g", og, tg)
	}
}

// TestLlamaSaveLoadRoundTrip: Save writes exactly the tensors transformers
// saves for the model (the script's state dict: names, shapes, bits; the
// value head as score.weight; no tied lm_head), a config.json that parses
// back to the same architecture with the right architectures entry, and a
// Load of it computes the same logits.
func TestLlamaSaveLoadRoundTrip(t *testing.T) {
	for _, name := range llamaCases {
		for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
			t.Run(fmt.Sprintf("%s/%v", name, dt), func(t *testing.T) {
				src := filepath.Join("testdata", "llama", name)
				m := loadLlama(t, name, LoadOptions{DType: dt})
				dir := t.TempDir()
				if err := m.Save(dir, SaveOptions{}); err != nil {
					t.Fatal(err)
				}
				want := must(tensor.Open(filepath.Join(src, "model.safetensors")))
				defer want.Close()
				got := must(tensor.Open(filepath.Join(dir, "model.safetensors")))
				defer got.Close()
				wn, gn := slices.Sorted(slices.Values(want.Names())), slices.Sorted(slices.Values(got.Names()))
				if !slices.Equal(wn, gn) {
					t.Fatalf("saved tensors %v\nwant transformers' %v", gn, wn)
				}
				for _, n := range wn {
					wi, _ := want.Info(n)
					gi, _ := got.Info(n)
					if !slices.Equal(wi.Shape, gi.Shape) {
						t.Errorf("%s: shape %v, transformers %v", n, gi.Shape, wi.Shape)
					}
					size := 1
					for _, d := range wi.Shape {
						size *= d
					}
					a, b := make([]float32, size), make([]float32, size)
					must(0, want.ReadF32(n, a))
					must(0, got.ReadF32(n, b))
					if dt == kernels.F32 && !slices.Equal(a, b) {
						t.Errorf("%s: saved values differ from the loaded ones", n)
					}
				}
				raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
				var cfg map[string]any
				if err := json.Unmarshal(raw, &cfg); err != nil {
					t.Fatal(err)
				}
				arch := llamaArchitectures[m.Config.ModelType] + "ForCausalLM"
				if m.HasValueHead() {
					arch = llamaArchitectures[m.Config.ModelType] + "ForSequenceClassification"
					if cfg["num_labels"] != 1.0 {
						t.Errorf("num_labels %v, want 1", cfg["num_labels"])
					}
				}
				if fmt.Sprint(cfg["architectures"]) != "["+arch+"]" || cfg["model_type"] != m.Config.ModelType {
					t.Errorf("architectures %v, model_type %v; want [%s], %s", cfg["architectures"], cfg["model_type"], arch, m.Config.ModelType)
				}
				if dtn := map[kernels.DType]string{kernels.F32: "float32", kernels.BF16: "bfloat16"}[dt]; cfg["torch_dtype"] != dtn {
					t.Errorf("torch_dtype %v, want %s", cfg["torch_dtype"], dtn)
				}
				back := must(Load(newCPU(t, 1), dir, LoadOptions{DType: dt}))
				c1, c2 := *m.Config, *back.Config
				c1.raw, c2.raw, c1.TorchDtype, c2.TorchDtype = nil, nil, "", ""
				if fmt.Sprintf("%+v", c1) != fmt.Sprintf("%+v", c2) {
					t.Errorf("config changed in the round trip:\n%+v\n%+v", c1, c2)
				}
				rng := rand.New(rand.NewPCG(3, 4))
				ids, mask := leftPadded(rng, m, 7, []int{2, 0})
				if !slices.Equal(forwardLogits(t, m, ids, mask, 2, 7), forwardLogits(t, back, ids, mask, 2, 7)) {
					t.Error("logits differ after save and reload")
				}
			})
		}
	}
}

// TestValueHeadDropsUntiedLMHead: an untied Llama with a value head saves
// as transformers' LlamaForSequenceClassification does (score.weight, no
// lm_head.weight), and loads back as a reward model with the same values.
func TestValueHeadDropsUntiedLMHead(t *testing.T) {
	m := loadLlama(t, "llama", LoadOptions{ValueHead: "yes", ValueHeadSeed: 7})
	if m.Config.TieWordEmbeddings {
		t.Fatal("the llama case is meant to be untied")
	}
	dir := t.TempDir()
	if err := m.Save(dir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	ck := must(tensor.Open(filepath.Join(dir, "model.safetensors")))
	_, hasLMHead := ck.Info("lm_head.weight")
	_, hasScore := ck.Info("score.weight")
	ck.Close()
	if hasLMHead || !hasScore {
		t.Errorf("saved lm_head.weight %v, score.weight %v; want only score.weight", hasLMHead, hasScore)
	}
	back := must(Load(newCPU(t, 1), dir, LoadOptions{ValueHead: "require"}))
	rng := rand.New(rand.NewPCG(3, 4))
	ids, mask := leftPadded(rng, m, 7, []int{2, 0})
	if !slices.Equal(forwardValues(t, m, ids, mask, 2, 7), forwardValues(t, back, ids, mask, 2, 7)) {
		t.Error("values differ after save and reload")
	}
	if _, err := Load(newCPU(t, 1), dir, LoadOptions{ValueHead: "no"}); err == nil || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Errorf("loading the reward model as a causal LM: %v, want an error naming lm_head.weight", err)
	}
}

// TestLlamaFormats loads one tiny Qwen2 from an fp16 safetensors, a sharded
// bf16 set with its index, and DeepSpeed-Chat's reward-model names
// (rwtransformer.*, v_head.weight, and a stale rotary_emb.inv_freq): the
// same logits and values as PyTorch's for those weights, bit-identical
// across the layouts.
func TestLlamaFormats(t *testing.T) {
	root := filepath.Join("testdata", "llama", "formats")
	g := openGolden(t, filepath.Join(root, "expected.safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	var first []float32
	for _, sub := range []string{"fp16", "sharded_bf16", "dschat_reward"} {
		t.Run(sub, func(t *testing.T) {
			m := must(Load(newCPU(t, 2), filepath.Join(root, sub), LoadOptions{ValueHead: "require"}))
			a := must(m.NewActs(shape[0], shape[1], ActsOptions{}))
			if err := m.Forward(a, Batch{IDs: ids, Mask: mask}); err != nil {
				t.Fatal(err)
			}
			got, _ := m.Logits(a)
			checkClose(t, "logits vs PyTorch", got, g.f32("logits"), 1e-5, 0)
			v, _ := m.Values(a)
			checkClose(t, "values vs PyTorch", v, g.f32("values"), 1e-5, 0)
			if first == nil {
				first = got
			} else if !slices.Equal(first, got) {
				t.Error("logits differ from those of the fp16 copy")
			}
		})
	}
}

// TestLlamaGradientSpotCheck compares a few gradient entries of each kind of
// parameter with central differences of the fp32 loss (a check of the whole
// backward that needs no golden file).
func TestLlamaGradientSpotCheck(t *testing.T) {
	for _, name := range llamaCases {
		t.Run(name, func(t *testing.T) {
			m := loadLlama(t, name, LoadOptions{})
			rng := rand.New(rand.NewPCG(9, 9))
			in, dv := actsBatch(rng, m, 2, 6)
			a := must(m.NewActs(2, 6, ActsOptions{Train: true}))
			objective := func() float64 {
				if err := m.Forward(a, in); err != nil {
					t.Fatal(err)
				}
				l, _, _ := m.MeanLoss(a)
				obj := float64(l)
				if m.HasValueHead() {
					v, _ := m.Values(a)
					for i := range v {
						obj += float64(v[i]) * float64(dv[i])
					}
				}
				return obj
			}
			objective()
			g := m.MeanLossGrad(a)
			if m.HasValueHead() {
				g.DValues = dv
			}
			must(0, m.AllocGrads())
			m.ZeroGrads()
			if err := m.Backward(a, g); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, pn := range m.ParamNames() {
				if !strings.HasPrefix(pn, "layers.1.") && strings.HasPrefix(pn, "layers.") {
					continue
				}
				pv, gv := must(m.ParamView(m.Params, pn)), must(m.ParamView(m.Grads, pn))
				w, gr := make([]float32, pv.Len()), make([]float32, gv.Len())
				m.Dev.ReadF32(w, pv)
				m.Dev.ReadF32(gr, gv)
				i := slices.IndexFunc(gr, func(x float32) bool { return math.Abs(float64(x)) > 1e-3 })
				if i < 0 {
					continue
				}
				const h = 1e-2
				orig := w[i]
				w[i] = orig + h
				m.Dev.WriteF32(pv, w)
				up := objective()
				w[i] = orig - h
				m.Dev.WriteF32(pv, w)
				down := objective()
				w[i] = orig
				m.Dev.WriteF32(pv, w)
				fd := (up - down) / (2 * h)
				if d := math.Abs(fd - float64(gr[i])); d > 2e-2*math.Abs(fd)+2e-4 {
					t.Errorf("%s[%d]: gradient %.6g, central difference %.6g", pn, i, gr[i], fd)
				}
				checked++
			}
			if checked < 8 {
				t.Errorf("only %d parameters checked", checked)
			}
		})
	}
}

func TestLlamaPositions(t *testing.T) {
	got := llamaPositions([]int32{0, 0, 1, 1, 1, 1, 1, 0}, 2, 4, nil)
	want := []int32{1, 1, 0, 1, 0, 1, 2, 1} // cumsum−1, masked_fill(mask==0, 1)
	if !slices.Equal(got, want) {
		t.Errorf("positions %v, want %v", got, want)
	}
	if got := llamaPositions([]int32{1, 0}, 2, 1, []int32{3, 4}); !slices.Equal(got, []int32{3, 1}) {
		t.Errorf("positions with start %v, want [3 1]", got)
	}
}

// llamaConfigJSON is a valid Llama config.json with some keys replaced
// (a nil value deletes the key).
func llamaConfigJSON(over map[string]any) []byte {
	c := map[string]any{"model_type": "llama", "vocab_size": 100, "hidden_size": 16, "intermediate_size": 32,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	b, _ := json.Marshal(c)
	return b
}

func TestLlamaConfig(t *testing.T) {
	parse := func(over map[string]any) *Config {
		t.Helper()
		c, err := ParseConfig(llamaConfigJSON(over))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse(nil)
	if c.HeadSize() != 4 || c.KVHeads() != 2 || c.PadTokenID != 2 || c.EOSTokenID != 2 || c.BOSTokenID != 1 ||
		c.RMSNormEps != 1e-6 || c.RopeTheta != 10000 || c.MaxPositions != 2048 || c.TieWordEmbeddings || c.QKVBias {
		t.Errorf("LlamaConfig defaults: %+v", c)
	}
	c = parse(map[string]any{"eos_token_id": []int{7, 9}, "pad_token_id": nil, "num_key_value_heads": nil})
	if c.EOSTokenID != 7 || !slices.Equal(c.EOSTokenIDs, []int{7, 9}) || !c.IsEOS(9) || c.IsEOS(8) || c.PadTokenID != 7 || c.KVHeads() != 4 {
		t.Errorf("eos list: %+v", c)
	}
	c = parse(map[string]any{"model_type": "qwen2", "num_attention_heads": 32, "hidden_size": 64, "num_key_value_heads": nil,
		"use_sliding_window": false, "sliding_window": 10})
	if !c.QKVBias || c.OutBias || c.KVHeads() != 32 || c.BOSTokenID != -1 || c.MaxPositions != 32768 {
		t.Errorf("Qwen2Config: %+v", c)
	}
	c = parse(map[string]any{"model_type": "qwen3", "num_attention_heads": 2, "num_key_value_heads": 1})
	if !c.QKNorm || c.HeadSize() != 128 || c.QKVBias {
		t.Errorf("Qwen3Config: %+v", c)
	}
	c = parse(map[string]any{"rope_scaling": map[string]any{"type": "linear", "factor": 2.0}})
	if c.RopeScaling.Type != "linear" || c.RopeScaling.Factor != 2 {
		t.Errorf("legacy rope_scaling type: %+v", c.RopeScaling)
	}
	parse(map[string]any{"model_type": "mistral", "sliding_window": json.RawMessage("null"), "max_position_embeddings": 8192})
	parse(map[string]any{"model_type": "mistral", "sliding_window": 8192, "max_position_embeddings": 8192})
	parse(map[string]any{"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 100, "max_window_layers": 2})

	cases := []struct {
		name string
		over map[string]any
		want string
	}{
		{"missing size", map[string]any{"intermediate_size": nil}, `"intermediate_size" is missing`},
		{"gqa", map[string]any{"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"},
		{"act", map[string]any{"hidden_act": "gelu"}, `"hidden_act"`},
		{"yarn", map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4.0}}, `"yarn" is not supported`},
		{"dynamic", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 2.0}}, `"dynamic" is not supported`},
		{"llama3 params", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0}}, "llama3"},
		{"rope no type", map[string]any{"rope_scaling": map[string]any{"factor": 8.0}}, "no rope_type"},
		{"mistral window", map[string]any{"model_type": "mistral", "max_position_embeddings": 32768}, "sliding-window attention"},
		{"mistral window set", map[string]any{"model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}, "window 4096"},
		{"qwen2 window", map[string]any{"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 100, "max_window_layers": 1}, "sliding-window"},
		{"partial rotary", map[string]any{"partial_rotary_factor": 0.5}, "partial_rotary_factor"},
		{"eos", map[string]any{"eos_token_id": "x"}, "eos_token_id"},
		{"eos range", map[string]any{"eos_token_id": []int{2, 100}}, "outside the vocabulary"},
		{"attention dropout", map[string]any{"attention_dropout": 0.1}, "attention_dropout"},
		{"odd head dim", map[string]any{"head_dim": 5}, "head_dim 5"},
	}
	for _, c := range cases {
		_, err := ParseConfig(llamaConfigJSON(c.over))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	_, err := ParseConfig([]byte(`{"model_type": "gemma", "vocab_size": 4}`))
	if err == nil || !strings.Contains(err.Error(), "opt, llama, mistral, qwen2, qwen3") {
		t.Errorf("unknown model_type: %v", err)
	}
}

// TestLlamaPresets: the released shapes have their published parameter
// counts, llama-125m is opt-125m-sized, and every preset builds.
func TestLlamaPresets(t *testing.T) {
	for _, c := range []struct {
		name string
		want int
	}{
		{"llama-1b", 1_235_814_400},   // meta-llama/Llama-3.2-1B
		{"qwen2.5-0.5b", 494_032_768}, // Qwen/Qwen2.5-0.5B
		{"qwen3-0.6b", 596_049_920},   // Qwen/Qwen3-0.6B
		{"llama-125m", 124_668_672},   // beside opt-125m's 125_239_296
	} {
		cfg, err := PresetConfig(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.NumParams(); got != c.want {
			t.Errorf("%s: %d parameters, want %d", c.name, got, c.want)
		}
	}
	for _, name := range PresetNames() {
		cfg, err := PresetConfig(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b, err := cfg.MarshalJSON(); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if back, err := ParseConfig(b); err != nil || back.NumParams() != cfg.NumParams() || back.HeadSize() != cfg.HeadSize() {
			t.Errorf("%s: config.json does not parse back to the same model: %v", name, err)
		}
	}
	// The tiny presets run.
	for _, name := range []string{"llama-tiny", "qwen2-tiny"} {
		cfg := must(PresetConfig(name))
		m := must(New(newCPU(t, 2), cfg, Options{}))
		m.InitRandom(1, 0.02)
		rng := rand.New(rand.NewPCG(1, 1))
		ids, mask := leftPadded(rng, m, 5, []int{0, 2})
		l := forwardLogits(t, m, ids, mask, 2, 5)
		if slices.ContainsFunc(l, func(x float32) bool { return math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) }) ||
			!slices.ContainsFunc(l, func(x float32) bool { return x != 0 }) {
			t.Errorf("%s: logits not finite, or all zero", name)
		}
		m.Free()
	}
}

// TestLlamaMemoryFunctionsMatchAllocations is TestMemoryFunctionsMatchAllocations
// for the LLaMA family (F32 and BF16 weights, so with and without the bf16
// store); the KV cache is sized by the KV heads.
func TestLlamaMemoryFunctionsMatchAllocations(t *testing.T) {
	dev := newCPU(t, 1)
	for _, name := range llamaCases {
		for _, vh := range []bool{false, true} {
			cfg := loadLlama(t, name, LoadOptions{}).Config
			m := must(New(dev, cfg, Options{ValueHead: vh}))
			if got, want := ParamCount(cfg, vh), m.NumParams(); got != want {
				t.Errorf("%s: ParamCount %d, NumParams %d", name, got, want)
			}
			for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
				mm := must(New(dev, cfg, Options{ValueHead: vh, DType: dt}))
				for _, bt := range [][2]int{{1, 1}, {2, 7}} {
					for k := range 16 {
						o := ActsOptions{Train: k&1 != 0, Checkpoint: k&2 != 0, NoLogits: k&4 != 0, F32Acts: k&8 != 0}
						a := must(mm.NewActs(bt[0], bt[1], o))
						if got, want := ActsBytes(cfg, vh, bt[0], bt[1], o, mm.WeightsInfo()), a.Bytes(); got != want {
							t.Errorf("%s %v %dx%d %+v: ActsBytes %d, NewActs holds %d", name, dt, bt[0], bt[1], o, got, want)
						}
						a.Free()
					}
				}
				mm.Free()
			}
			// ZeRO's units: the layers are consecutive blocks between the
			// embeddings and the final norm and heads.
			end, _ := m.LayerRange(0)
			if first, _, _ := m.ParamRange("layers.0.input_layernorm.weight"); end != cfg.VocabSize*cfg.HiddenSize || first != end {
				t.Errorf("%s: layer 0 starts at %d", name, end)
			}
			for l := range cfg.NumLayers {
				off, n := m.LayerRange(l)
				if off != end || n <= 0 {
					t.Errorf("%s: layer %d at %d (+%d), want %d", name, l, off, n, end)
				}
				end = off + n
			}
			if norm, _, _ := m.ParamRange("norm.weight"); norm != end {
				t.Errorf("%s: the final norm at %d, the layers end at %d", name, norm, end)
			}
			kc := must(m.NewCache(3, 16, 5))
			if got, want := CacheBytes(cfg, 3, 16, 5), kc.Bytes(); got != want {
				t.Errorf("%s: CacheBytes %d, NewCache holds %d", name, got, want)
			}
			kv := 2 * cfg.NumLayers * 3 * cfg.KVHeads() * 16 * cfg.HeadSize() * 4
			if kc.k[0].Len()*4*2*cfg.NumLayers != kv {
				t.Errorf("%s: KV cache of %d bytes, want %d (KV heads)", name, kc.k[0].Len()*8*cfg.NumLayers, kv)
			}
			kc.Free()
			m.Free()
		}
	}
}

// TestLlamaFrozenBase: with FreezeBase only the value head gets a gradient,
// equal to the fully allocated model's.
func TestLlamaFrozenBase(t *testing.T) {
	load := func() *Model { return loadLlama(t, "qwen2", LoadOptions{}) }
	frozen, full := load(), load()
	frozen.FreezeBase = true
	must(0, frozen.AllocGrads())
	must(0, full.AllocGrads())
	rng := rand.New(rand.NewPCG(3, 4))
	in, dv := actsBatch(rng, frozen, 2, 6)
	vhead := func(m *Model) []float32 {
		m.ZeroGrads()
		a := must(m.NewActs(2, 6, ActsOptions{Train: true}))
		if err := m.Forward(a, in); err != nil {
			t.Fatal(err)
		}
		g := m.MeanLossGrad(a)
		g.DValues = dv
		if err := m.Backward(a, g); err != nil {
			t.Fatal(err)
		}
		v := must(m.ParamView(m.Grads, "v_head.weight"))
		out := make([]float32, v.Len())
		m.Dev.ReadF32(out, v)
		return out
	}
	if got, want := vhead(frozen), vhead(full); !slices.Equal(got, want) {
		t.Errorf("frozen value-head gradient %v, want %v", got[:3], want[:3])
	}
}

// ropeDev counts the F32 writes of a pass: Forward without Train writes
// nothing F32 but the rotary tables (cos and sin: two writes per fill).
type ropeDev struct {
	countingDev
	writes []int // lengths
}

func (d *ropeDev) WriteF32(b kernels.Buffer, src []float32) {
	d.writes = append(d.writes, len(src))
	d.Device.WriteF32(b, src)
}

// TestLlamaRopeTables: the rotary tables live with a pass's buffers, sized
// to its positions, not with the model (whose only allocation is its
// parameters, whatever max_position_embeddings); a reused Acts fills them
// only when T grows past every T before, and computes exactly what fresh
// Acts do over shrinking and growing shapes, with and without gradient
// checkpointing, also when a model of another rope_theta reuses them; a
// KV cache fills its tables once, for Tmax positions.
func TestLlamaRopeTables(t *testing.T) {
	for _, name := range llamaCases {
		t.Run(name, func(t *testing.T) {
			dev := &ropeDev{countingDev: countingDev{Device: newCPU(t, 2)}}
			src := loadLlama(t, name, LoadOptions{ValueHead: "yes", ValueHeadSeed: 3})
			cfg := *src.Config
			cfg.MaxPositions = 131072 // llama-1b's: 33 MB of tables at llama-1b's head size
			m := must(New(dev, &cfg, Options{ValueHead: true}))
			if dev.allocs != 1 || dev.elems != m.NumParams() {
				t.Errorf("New made %d allocations of %d elements, want the %d parameters only", dev.allocs, dev.elems, m.NumParams())
			}
			w := make([]float32, m.NumParams())
			src.Dev.ReadF32(w, src.Params.Flat)
			dev.Device.WriteF32(m.Params.Flat, w)
			must(0, m.AllocGrads())
			HS2 := cfg.HeadSize() / 2

			// Fills: T 5, 9 and 12 fill, the shapes within them do not.
			var a *Acts
			rng := rand.New(rand.NewPCG(3, 4))
			for _, s := range []struct{ b, t, fill int }{{2, 5, 5}, {1, 9, 9}, {3, 3, 0}, {2, 9, 0}, {1, 12, 12}, {1, 1, 0}} {
				a = must(m.ReuseActs(a, s.b, s.t, ActsOptions{}))
				in, _ := actsBatch(rng, m, s.b, s.t)
				dev.writes = nil
				if err := m.Forward(a, in); err != nil {
					t.Fatal(err)
				}
				want := []int(nil)
				if s.fill > 0 {
					want = []int{s.fill * HS2, s.fill * HS2}
				}
				if !slices.Equal(dev.writes, want) {
					t.Errorf("a [%d,%d] pass wrote %v F32 elements, want %v", s.b, s.t, dev.writes, want)
				}
			}
			a.Free()

			// Reused and fresh Acts agree bit for bit; the shape [1,1] has a
			// padding row at position 1 beyond T.
			other := cfg
			other.RopeTheta *= 3
			o := must(New(dev, &other, Options{ValueHead: true}))
			dev.Device.WriteF32(o.Params.Flat, w)
			must(0, o.AllocGrads())
			shapes := [][2]int{{2, 9}, {3, 4}, {1, 12}, {2, 1}, {4, 7}}
			for _, opts := range []ActsOptions{{Train: true}, {Train: true, Checkpoint: true}} {
				var r *Acts
				for i, s := range shapes {
					mm := m
					if i%2 == 1 {
						mm = o
					}
					in, dv := actsBatch(rng, mm, s[0], s[1])
					if s[1] == 1 {
						in.Mask = []int32{1, 0}
					}
					r = must(mm.ReuseActs(r, s[0], s[1], opts))
					fresh := must(mm.NewActs(s[0], s[1], opts))
					if d := runPass(t, mm, r, in, dv).diff(runPass(t, mm, fresh, in, dv)); d != "" {
						t.Errorf("%+v shape %v: %s of reused activations differ from fresh ones", opts, s, d)
					}
					fresh.Free()
				}
				r.Free()
			}

			// A cache fills its tables for Tmax positions, once.
			dev.writes = nil
			kc := must(m.NewCache(2, 6, 3))
			if want := []int{6 * HS2, 6 * HS2}; !slices.Equal(dev.writes, want) {
				t.Errorf("NewCache wrote %v F32 elements, want %v", dev.writes, want)
			}
			dev.writes = nil
			must(m.Decode(kc, []int32{5, 6, 7, 8, 9, 10}, nil, 3, LastLogits))
			must(m.Decode(kc, []int32{5, 6}, nil, 1, LastLogits))
			if len(dev.writes) != 0 {
				t.Errorf("Decode wrote %v F32 elements", dev.writes)
			}
			kc.Free()
			o.Free()
			m.Free()
		})
	}
}
