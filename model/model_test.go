package model

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/tensor"
)

func loadGolden(t *testing.T, name string) *Model {
	t.Helper()
	m, err := Load(newCPU(t, 2), filepath.Join("testdata", "golden", name), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// leftPadded returns a batch of B rows of length T, row b left-padded by pads[b].
func leftPadded(rng *rand.Rand, m *Model, T int, pads []int) ([]int32, []int32) {
	B := len(pads)
	ids, mask := make([]int32, B*T), make([]int32, B*T)
	for b := range B {
		for j := range T {
			if j < pads[b] {
				ids[b*T+j] = int32(m.Config.PadTokenID)
				continue
			}
			ids[b*T+j] = int32(3 + rng.IntN(m.Config.VocabSize-3))
			mask[b*T+j] = 1
		}
	}
	return ids, mask
}

func TestDecodeMatchesForward(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		t.Run(name, func(t *testing.T) {
			m := loadGolden(t, name)
			rng := rand.New(rand.NewPCG(1, 2))
			const T = 10
			ids, mask := leftPadded(rng, m, T, []int{0, 3, 9})
			B := 3
			a := must(m.NewActs(B, T, ActsOptions{}))
			if err := m.Forward(a, Batch{IDs: ids, Mask: mask}); err != nil {
				t.Fatal(err)
			}
			full, _ := m.Logits(a)
			V := m.Config.VocabSize
			row := func(src []int32, j, n int) []int32 { // columns j..j+n of every row
				out := make([]int32, 0, B*n)
				for b := range B {
					out = append(out, src[b*T+j:b*T+j+n]...)
				}
				return out
			}
			// One position at a time, then a prefill of 6 followed by single steps.
			for _, prefill := range []int{1, 6} {
				kc, err := m.NewCache(B, T, prefill)
				if err != nil {
					t.Fatal(err)
				}
				pos := 0
				for pos < T {
					n := 1
					if pos == 0 {
						n = prefill
					}
					got, err := m.Decode(kc, row(ids, pos, n), row(mask, pos, n), n, AllLogits)
					if err != nil {
						t.Fatal(err)
					}
					for b := range B {
						for j := range n {
							if mask[b*T+pos+j] == 0 {
								// A padding query attends to whatever keys
								// exist when it is computed; only real
								// positions are comparable (as in transformers).
								continue
							}
							want := full[((b*T)+pos+j)*V : ((b*T)+pos+j+1)*V]
							checkClose(t, "decode logits", got[(b*n+j)*V:(b*n+j+1)*V], want, 1e-5, 0)
						}
					}
					pos += n
				}
				if err := func() error { _, err := m.Decode(kc, row(ids, 0, 1), nil, 1, LastLogits); return err }(); err == nil {
					t.Error("decode past Tmax: no error")
				}
			}
		})
	}
}

func TestFormatsGiveIdenticalLogits(t *testing.T) {
	root := filepath.Join("testdata", "formats")
	g := openGolden(t, filepath.Join(root, "expected.safetensors"))
	ids, shape := g.i32("ids")
	mask, _ := g.i32("mask")
	want := g.f32("logits")
	var first []float32
	for _, sub := range []string{"safetensors", "bin_fp16_tied", "bin_bf16_copy", "bin_base_strided", "sharded", "rw_valuehead"} {
		t.Run(sub, func(t *testing.T) {
			m, err := Load(newCPU(t, 2), filepath.Join(root, sub), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a := must(m.NewActs(shape[0], shape[1], ActsOptions{}))
			if err := m.Forward(a, Batch{IDs: ids, Mask: mask}); err != nil {
				t.Fatal(err)
			}
			got, _ := m.Logits(a)
			checkClose(t, "logits vs PyTorch", got, want, 1e-5, 0)
			if first == nil {
				first = got
			} else if !slices.Equal(first, got) {
				t.Errorf("logits differ from those of the safetensors copy")
			}
			if sub == "rw_valuehead" {
				if !m.HasValueHead() {
					t.Fatal("v_head.weight not detected")
				}
				v, _ := m.Values(a)
				checkClose(t, "values", v, g.f32("values"), 1e-5, 0)
			}
		})
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		t.Run(name, func(t *testing.T) {
			m := loadGolden(t, name)
			dir := t.TempDir()
			if err := m.Save(dir, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			var files []string
			for _, e := range entries {
				files = append(files, e.Name())
			}
			if !slices.Equal(files, []string{"config.json", "model.safetensors"}) {
				t.Errorf("saved files %v, want config.json and model.safetensors", files)
			}
			ck, err := tensor.Open(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range ck.Names() {
				if !strings.HasPrefix(n, "model.decoder.") && n != "score.weight" {
					t.Errorf("tensor %q: transformers' OPTForCausalLM expects model.decoder.* (and OPTForSequenceClassification score.weight)", n)
				}
			}
			// A value head makes the file an OPTForSequenceClassification
			// reward model with one label.
			_, hasScore := ck.Info("score.weight")
			cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
			var c struct {
				Architectures []string `json:"architectures"`
				NumLabels     *int     `json:"num_labels"`
			}
			if err := json.Unmarshal(cfg, &c); err != nil {
				t.Fatal(err)
			}
			wantArch := "OPTForCausalLM"
			if m.HasValueHead() {
				wantArch = "OPTForSequenceClassification"
				if c.NumLabels == nil || *c.NumLabels != 1 {
					t.Errorf("num_labels %v, want 1", c.NumLabels)
				}
			}
			if hasScore != m.HasValueHead() || !slices.Equal(c.Architectures, []string{wantArch}) {
				t.Errorf("value head %v: score.weight saved %v, architectures %v (want %s)", m.HasValueHead(), hasScore, c.Architectures, wantArch)
			}
			if _, ok := ck.Info("model.decoder.layers.1.self_attn.q_proj.weight"); !ok {
				t.Error("q_proj weight not saved under its transformers name")
			}
			ck.Close()
			m2, err := Load(newCPU(t, 1), dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			ids, mask := leftPadded(rng, m, 7, []int{2, 0})
			l1 := forwardLogits(t, m, ids, mask, 2, 7)
			l2 := forwardLogits(t, m2, ids, mask, 2, 7)
			if !slices.Equal(l1, l2) {
				t.Error("logits differ after save and reload")
			}
			if m.HasValueHead() {
				if !m2.HasValueHead() {
					t.Fatal("the value head was not read back")
				}
				v1, v2 := forwardValues(t, m, ids, mask, 2, 7), forwardValues(t, m2, ids, mask, 2, 7)
				if !slices.Equal(v1, v2) {
					t.Error("values differ after save and reload")
				}
				// DeepSpeed-Chat's layout: rwtransformer.decoder.* and v_head.weight.
				ds := t.TempDir()
				if err := m.Save(ds, SaveOptions{Prefix: "rwtransformer.decoder."}); err != nil {
					t.Fatal(err)
				}
				dck := must(tensor.Open(filepath.Join(ds, "model.safetensors")))
				for _, n := range dck.Names() {
					if !strings.HasPrefix(n, "rwtransformer.decoder.") && n != "v_head.weight" {
						t.Errorf("DeepSpeed-Chat layout: tensor %q", n)
					}
				}
				dck.Close()
				if v3 := forwardValues(t, must(Load(newCPU(t, 1), ds, LoadOptions{})), ids, mask, 2, 7); !slices.Equal(v1, v3) {
					t.Error("values differ after a save in DeepSpeed-Chat's layout and reload")
				}
			}
		})
	}
}

func forwardLogits(t *testing.T, m *Model, ids, mask []int32, b, tt int) []float32 {
	t.Helper()
	l, _ := m.Logits(forwardActs(t, m, ids, mask, b, tt))
	return l
}

// forwardValues is the value head's output of a forward pass, [b*tt].
func forwardValues(t *testing.T, m *Model, ids, mask []int32, b, tt int) []float32 {
	t.Helper()
	v, err := m.Values(forwardActs(t, m, ids, mask, b, tt))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// forwardActs runs a forward pass of a [b, tt] batch.
func forwardActs(t *testing.T, m *Model, ids, mask []int32, b, tt int) *Acts {
	t.Helper()
	a := must(m.NewActs(b, tt, ActsOptions{}))
	if err := m.Forward(a, Batch{IDs: ids, Mask: mask}); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestDropout(t *testing.T) {
	m := loadGolden(t, "preln") // config dropout 0.1
	rng := rand.New(rand.NewPCG(5, 6))
	ids, mask := leftPadded(rng, m, 8, []int{0, 2})
	targets := ShiftLabels(ids, 2, 8)
	loss := func(train, ckpt bool, seed uint64) (float32, []float32) {
		a := must(m.NewActs(2, 8, ActsOptions{Train: train, Dropout: train, Checkpoint: ckpt}))
		if err := m.Forward(a, Batch{IDs: ids, Mask: mask, Targets: targets, Seed: seed}); err != nil {
			t.Fatal(err)
		}
		l, _, _ := m.MeanLoss(a)
		m.AllocGrads()
		m.ZeroGrads()
		if train {
			if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
				t.Fatal(err)
			}
		}
		g := make([]float32, m.NumParams())
		m.Dev.ReadF32(g, m.Grads.Flat)
		return l, g
	}
	eval, _ := loss(false, false, 1)
	l1, g1 := loss(true, false, 1)
	l1b, _ := loss(true, false, 1)
	l2, _ := loss(true, false, 2)
	lc, gc := loss(true, true, 1)
	if l1 == eval || l1 == l2 {
		t.Errorf("dropout has no effect: eval %v, seed1 %v, seed2 %v", eval, l1, l2)
	}
	if l1 != l1b || l1 != lc {
		t.Errorf("dropout not deterministic in its seed: %v %v (checkpointed %v)", l1, l1b, lc)
	}
	if !slices.Equal(g1, gc) {
		t.Error("gradient checkpointing with dropout changes the gradients")
	}
}

func TestPositions(t *testing.T) {
	got := Positions([]int32{0, 0, 1, 1, 1, 1, 1, 0}, 2, 4, nil)
	want := []int32{1, 1, 2, 3, 2, 3, 4, 1}
	if !slices.Equal(got, want) {
		t.Errorf("Positions = %v, want %v", got, want)
	}
	got = Positions([]int32{1, 1}, 2, 1, []int32{3, 0})
	if !slices.Equal(got, []int32{5, 2}) {
		t.Errorf("Positions with start = %v, want [5 2]", got)
	}
}

func TestBadInputs(t *testing.T) {
	m := loadGolden(t, "preln")
	a := must(m.NewActs(1, 4, ActsOptions{}))
	cases := []struct {
		name string
		b    Batch
		want string
	}{
		{"short", Batch{IDs: []int32{1, 2}}, "want B·T"},
		{"vocab", Batch{IDs: []int32{1, 2, 3, 9999}}, "outside the vocabulary"},
		{"mask", Batch{IDs: []int32{1, 2, 3, 4}, Mask: []int32{1}}, "attention mask"},
		{"target", Batch{IDs: []int32{1, 2, 3, 4}, Targets: []int32{1, 2, 3, 5000}}, "target"},
	}
	for _, c := range cases {
		err := m.Forward(a, c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
