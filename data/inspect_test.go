package data

import (
	"strings"
	"testing"
)

func TestInspectSample(t *testing.T) {
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")}, sampleFile(t, "sample.jsonl"))
	io := InspectOptions{Split: Split{2, 4, 4}, Seed: 1234, MaxSeqLen: 80, MaxPromptLen: 48, AddEOS: true, EndText: DefaultEndText, EOS: tEOS}
	// Without a tokenizer: counts and examples, no lengths.
	rep, err := Inspect(ds, io)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tokenized || len(rep.Parts) != 2 {
		t.Fatalf("report %+v", rep)
	}
	tr := rep.Parts[0]
	if tr.Rows != 24 || len(tr.Schema) != 4 || tr.Schema[0].Name != "prompt" {
		t.Errorf("train part %+v", tr)
	}
	for k, n := range []int64{4, 10, 10} {
		ph := tr.Phases[k]
		if ph.Stats.Selected != n || ph.Stats.Kept != n || len(ph.Examples) != 3 || ph.Lengths != nil {
			t.Errorf("phase %d: %+v", k+1, ph.Stats)
		}
		for i, ex := range ph.Examples {
			if ex.Row != samplePhaseRows[k][i] {
				t.Errorf("phase %d example %d is row %d, want %d", k+1, i, ex.Row, samplePhaseRows[k][i])
			}
		}
	}
	// With a tokenizer: too-long and truncated counts, length percentiles.
	io.Tokenizer = &batchTok{}
	rep, err = Inspect(ds, io)
	if err != nil {
		t.Fatal(err)
	}
	tr = rep.Parts[0]
	if st := tr.Phases[2].Stats; st.Kept != 7 || st.TooLong != 3 {
		t.Errorf("phase 3 stats %+v", st)
	}
	if st := tr.Phases[0].Stats; st.Truncated != 2 {
		t.Errorf("phase 1 stats %+v", st)
	}
	// Phase 1 lengths (BOS + bytes + EOS): rows 7, 16, 2, 3 -> 79, 100, 95, 80.
	l := tr.Phases[0].Lengths[0]
	if l.N != 4 || l.Min != 79 || l.Max != 100 || l.P50 != 80 || l.OverLimit != 2 || l.Mean != 88.5 {
		t.Errorf("phase 1 lengths %+v", l)
	}
	// Phase 3: the dropped prompts are the three longest (52, 54, 69).
	if l := tr.Phases[2].Lengths[0]; l.N != 10 || l.Max != 69 || l.OverLimit != 3 {
		t.Errorf("phase 3 lengths %+v", l)
	}
	if ex := tr.Phases[2].Examples[0]; ex.Row != 20 || len(ex.Example.IDs) != 44 {
		t.Errorf("phase 3 first example %+v", ex)
	}
	if ev := rep.Parts[1]; ev.Missing || ev.Rows != 24 || ev.Split != "test" {
		t.Errorf("eval part %+v", ev)
	}
}

func TestInspectMalformed(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "train.jsonl", strings.Repeat(oneRow, 4)+`{"prompt": 1, "chosen": " c", "rejected": " r"}`+"\n"+`{"prompt": null, "chosen": " c", "rejected": " r"}`+"\n")
	ds := fileDataset(rmStatic(t), []string{f})
	rep, err := Inspect(ds, InspectOptions{Split: Split{1, 0, 0}, MaxSeqLen: 64, MaxPromptLen: 64, Tokenizer: &byteTok{}})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.Parts[0].Phases[0].Stats
	if st.Selected != 6 || st.Kept != 4 || st.Malformed != 1 || st.Empty != 1 || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], `row 5`) {
		t.Errorf("stats %+v", st)
	}
	if !rep.Parts[1].Missing {
		t.Error("eval part not missing")
	}
	if _, err := Inspect(ds, InspectOptions{Split: Split{1, 1}}); err == nil {
		t.Error("a two-part split accepted")
	}
}

func TestPercentile(t *testing.T) {
	v := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]int{50: 5, 90: 9, 99: 10, 100: 10, 1: 1} {
		if got := percentile(v, p); got != want {
			t.Errorf("p%v = %d, want %d", p, got, want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
}
