package reward

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/tensor"
)

func relErr(got, want []float32, floor float64) float64 {
	var d, r float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		r = math.Max(r, math.Abs(float64(want[i])))
	}
	return d / math.Max(r, floor)
}

// TestStageMatchesPyTorch runs the reward stage on the golden pairs and
// compares values, scores, the loss and every parameter gradient with a
// PyTorch port of REFERENCE.md §4 (scripts/gen_stage_golden.py).
func TestStageMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"preln", "postln"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			dev, _ := cpu.New(cpu.Options{Threads: 2})
			m, err := model.Load(dev, dir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ck, err := tensor.Open(filepath.Join(dir, "pairs.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			f32 := func(n string) []float32 {
				info, _ := ck.Info(n)
				out := make([]float32, info.Numel())
				if err := ck.ReadF32(n, out); err != nil {
					t.Fatal(err)
				}
				return out
			}
			i32 := func(n string) []int32 {
				v, err := ck.ReadI64(n)
				if err != nil {
					t.Fatal(err)
				}
				out := make([]int32, len(v))
				for i, x := range v {
					out[i] = int32(x)
				}
				return out
			}
			cid, rid, cm, rm := i32("chosen_ids"), i32("rejected_ids"), i32("chosen_mask"), i32("rejected_mask")
			const B, T = 4, 9
			set := &data.Set{Phase: data.PhaseReward}
			for b := range B {
				set.Examples = append(set.Examples, data.Example{IDs: cid[b*T : b*T+int(seqEnd(cm[b*T:(b+1)*T]))],
					Rejected: rid[b*T : b*T+int(seqEnd(rm[b*T:(b+1)*T]))]})
			}
			st, err := New(m, set, set, Options{MaxSeqLen: T, PAD: 1, EvalBatch: B})
			if err != nil {
				t.Fatal(err)
			}
			m.AllocGrads()
			bs, err := st.TrainBatch([]int{0, 1, 2, 3}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr([]float32{float32(bs.Loss)}, f32("loss"), 0); e > 1e-5 {
				t.Errorf("loss %v, PyTorch %v", bs.Loss, f32("loss"))
			}
			global := 0.0
			for _, n := range m.ParamNames() {
				for _, x := range f32("grad." + n) {
					global = math.Max(global, math.Abs(float64(x)))
				}
			}
			for _, n := range m.ParamNames() {
				view, _ := m.ParamView(m.Grads, n)
				got := make([]float32, view.Len())
				dev.ReadF32(got, view)
				if e := relErr(got, f32("grad."+n), 1e-3*global); e > 1e-4 {
					t.Errorf("grad %s: relative error %.3g > 1e-4", n, e)
				}
			}
			// Values and scores, through the evaluation path.
			a := must(m.NewActs(2*B, T, model.ActsOptions{NoLogits: true}))
			if err := m.Forward(a, model.Batch{IDs: append(append([]int32{}, cid...), rid...), Mask: append(append([]int32{}, cm...), rm...)}); err != nil {
				t.Fatal(err)
			}
			v, _ := m.Values(a)
			if e := relErr(v, f32("values"), 0); e > 1e-5 {
				t.Errorf("values: relative error %.3g", e)
			}
			res, _ := PairwiseLoss(PairBatch{B: B, T: T, ChosenIDs: cid, RejectedIDs: rid, ChosenMask: cm, RejectedMask: rm,
				ChosenValues: v[:B*T], RejectValues: v[B*T:]})
			if e := relErr(res.ChosenScore, f32("chosen_scores"), 0); e > 1e-5 {
				t.Errorf("chosen scores %v, PyTorch %v", res.ChosenScore, f32("chosen_scores"))
			}
			if e := relErr(res.RejScore, f32("rejected_scores"), 0); e > 1e-5 {
				t.Errorf("rejected scores %v, PyTorch %v", res.RejScore, f32("rejected_scores"))
			}
			// Score: the same scores from unpadded sequences, in any batch size.
			var seqs [][]int32
			for _, ex := range set.Examples {
				seqs = append(seqs, ex.IDs)
			}
			for _, ex := range set.Examples {
				seqs = append(seqs, ex.Rejected)
			}
			want := append(f32("chosen_scores"), f32("rejected_scores")...)
			for _, batch := range []int{0, 1, 3} {
				got, err := Score(m, seqs, batch)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(got, want, 0); e > 1e-5 {
					t.Errorf("Score batch %d: %v, PyTorch %v", batch, got, want)
				}
			}
			if _, err := Score(m, [][]int32{{}}, 0); err == nil {
				t.Error("Score accepted an empty sequence")
			}
			e, err := st.Evaluate()
			if err != nil {
				t.Fatal(err)
			}
			ev, err := e.Run()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(ev["eval_loss"]-bs.Loss) > 1e-6 {
				t.Errorf("eval loss %v != train loss %v on the same pairs", ev["eval_loss"], bs.Loss)
			}
		})
	}
}
