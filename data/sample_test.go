package data

import (
	"reflect"
	"testing"
)

// These tests run on ../shared/data/rm-static-sample: 24 rows with the
// Dahoas/rm-static columns (prompt, response, chosen, rejected), once as
// Parquet and once as JSON lines. Token expectations use byteTok (BOS, then
// byte+3 per UTF-8 byte), so every id below can be checked by hand.

func TestSampleSchema(t *testing.T) {
	fields, err := ReadSchema(sampleFile(t, "sample.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{{"prompt", "utf8"}, {"response", "utf8"}, {"chosen", "utf8"}, {"rejected", "utf8"}}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("parquet schema %v, want %v", fields, want)
	}
	fields, err = ReadSchema(sampleFile(t, "sample.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want = []Field{{"prompt", "string"}, {"response", "string"}, {"chosen", "string"}, {"rejected", "string"}}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("jsonl schema %v, want %v", fields, want)
	}
}

func TestSampleParquetEqualsJSONL(t *testing.T) {
	a := rmStatic(t)
	pq, err := ReadSamples(sampleFile(t, "sample.parquet"), a)
	if err != nil {
		t.Fatal(err)
	}
	jl, err := ReadSamples(sampleFile(t, "sample.jsonl"), a)
	if err != nil {
		t.Fatal(err)
	}
	if len(pq) != 24 || len(jl) != 24 {
		t.Fatalf("rows: parquet %d, jsonl %d, want 24", len(pq), len(jl))
	}
	for i := range pq {
		if pq[i] != jl[i] {
			t.Errorf("row %d differs:\nparquet %+v\njsonl   %+v", i, pq[i], jl[i])
		}
	}
	// Row 7 by hand: rm-static strings are used as they are.
	want := Sample{
		Prompt:         "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant:",
		Chosen:         " Which warehouse?",
		Rejected:       " I can't figure out which warehouse you mean.",
		PromptChosen:   "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant: Which warehouse?",
		PromptRejected: "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant: I can't figure out which warehouse you mean.",
	}
	if pq[7] != want {
		t.Errorf("row 7 = %+v\nwant %+v", pq[7], want)
	}
	for _, f := range []string{"sample.parquet", "sample.jsonl"} {
		n, err := CountRows(sampleFile(t, f))
		if err != nil || n != 24 {
			t.Errorf("CountRows(%s) = %d, %v", f, n, err)
		}
	}
}

// samplePhaseRows is the phase split of the 24 sample rows with seed 1234
// and 2,4,4: numpy's permutation [7 16 2 3 | 1 18 5 4 0 8 13 21 10 22 |
// 20 14 11 9 17 23 12 6 19 15] cut at [0 4 14 24].
var samplePhaseRows = [3][]int64{
	{7, 16, 2, 3},
	{1, 18, 5, 4, 0, 8, 13, 21, 10, 22},
	{20, 14, 11, 9, 17, 23, 12, 6, 19, 15},
}

func sampleOptions(tok Tokenizer) Options {
	return Options{
		Split: Split{2, 4, 4}, Seed: 1234,
		MaxSeqLen: 80, MaxPromptLen: 48, MaxAnswerLen: 16,
		AddEOS: true, EndText: DefaultEndText, EOS: tEOS, PAD: tPAD,
		Tokenizer: tok,
	}
}

func rowsOf(s *Set) []int64 {
	var r []int64
	for _, ex := range s.Examples {
		r = append(r, ex.Row)
	}
	return r
}

func TestSamplePhaseSplit(t *testing.T) {
	for _, f := range []string{"sample.parquet", "sample.jsonl"} {
		ds := fileDataset(rmStatic(t), []string{sampleFile(t, f)})
		seen := map[int64]int{}
		for k, p := range []Phase{PhaseSFT, PhaseReward} {
			set, err := Build(ds, Train, p, sampleOptions(&byteTok{}))
			if err != nil {
				t.Fatal(err)
			}
			if got := rowsOf(set); !reflect.DeepEqual(got, samplePhaseRows[k]) {
				t.Errorf("%s phase %d rows %v, want %v", f, p, got, samplePhaseRows[k])
			}
			for _, r := range rowsOf(set) {
				seen[r]++
			}
		}
		set, err := Build(ds, Train, PhasePPO, sampleOptions(&byteTok{}))
		if err != nil {
			t.Fatal(err)
		}
		// Prompts over 48 tokens (BOS + bytes) are dropped: rows 11 (52),
		// 23 (69) and 15 (54).
		want := []int64{20, 14, 9, 17, 12, 6, 19}
		if got := rowsOf(set); !reflect.DeepEqual(got, want) {
			t.Errorf("%s phase 3 rows %v, want %v", f, got, want)
		}
		st := set.Stats[0]
		if st.Rows != 24 || st.Selected != 10 || st.Kept != 7 || st.TooLong != 3 || st.Empty != 0 || st.Malformed != 0 {
			t.Errorf("%s phase 3 stats %+v", f, st)
		}
		for _, r := range samplePhaseRows[2] {
			if seen[r] != 0 {
				t.Errorf("row %d used by phase 3 and an earlier phase", r)
			}
		}
	}
}

// checkRow compares row r of a [B,T] slice.
func checkRow(t *testing.T, what string, got []int32, r, T int, want []int32) {
	t.Helper()
	if row := got[r*T : (r+1)*T]; !reflect.DeepEqual(row, want) {
		t.Errorf("%s row %d:\n got %v\nwant %v", what, r, row, want)
	}
}

// fill returns n copies of v.
func fill(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestSampleSFTExamples(t *testing.T) {
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	set, err := Build(ds, Train, PhaseSFT, sampleOptions(&byteTok{}))
	if err != nil {
		t.Fatal(err)
	}
	// Row 7: prompt 60 bytes, chosen " Which warehouse?" 17 bytes:
	// BOS + 77 bytes + EOS = 79 tokens, PromptLen = BOS + 60 = 61.
	// Row 16: 46+52 bytes, row 2: 57+36 bytes: over 80, truncated (EOS cut).
	// Row 3: 61+17 bytes + BOS + EOS = exactly 80.
	ex := set.Examples[0]
	p7 := "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant:"
	want7 := cat(enc(p7+" Which warehouse?"), []int32{tEOS})
	if len(want7) != 79 || !reflect.DeepEqual(ex.IDs, want7) || ex.PromptLen != 61 {
		t.Fatalf("row 7 example: %d ids, prompt %d; want 79 ids %v, prompt 61", len(ex.IDs), ex.PromptLen, want7)
	}
	// Spot-check by hand: BOS, "\n" = 10+3, "H" = 72+3, ..., ":" = 58+3, " " = 32+3, "W" = 87+3, "?" = 63+3, EOS.
	for _, c := range []struct{ i, id int }{{0, 2}, {1, 13}, {3, 75}, {60, 61}, {61, 35}, {62, 90}, {77, 66}, {78, 2}} {
		if int(ex.IDs[c.i]) != c.id {
			t.Errorf("row 7 id[%d] = %d, want %d", c.i, ex.IDs[c.i], c.id)
		}
	}
	if l := len(set.Examples[1].IDs); l != 80 || set.Examples[1].IDs[79] == tEOS {
		t.Errorf("row 16: %d ids ending %d, want 80 truncated ids", l, set.Examples[1].IDs[79])
	}
	if l := len(set.Examples[3].IDs); l != 80 || set.Examples[3].IDs[79] != tEOS {
		t.Errorf("row 3: %d ids, want 80 ending with EOS", l)
	}
	if st := set.Stats[0]; st.Selected != 4 || st.Kept != 4 || st.Truncated != 2 {
		t.Errorf("stats %+v, want 4 selected, 4 kept, 2 truncated", st)
	}

	for _, responseOnly := range []bool{false, true} {
		c := Collator{T: 80, PAD: tPAD, ResponseOnly: responseOnly}
		b, err := c.SFT(set.Examples)
		if err != nil {
			t.Fatal(err)
		}
		if b.B != 4 || b.T != 80 || len(b.IDs) != 320 || len(b.Mask) != 320 || len(b.Labels) != 320 {
			t.Fatalf("batch shape B=%d T=%d len %d/%d/%d", b.B, b.T, len(b.IDs), len(b.Mask), len(b.Labels))
		}
		// Right padding: 79 real tokens then one PAD.
		checkRow(t, "ids", b.IDs, 0, 80, cat(want7, []int32{tPAD}))
		checkRow(t, "mask", b.Mask, 0, 80, cat(fill(79, 1), fill(1, 0)))
		wantLabels := cat(want7, []int32{IgnoreIndex})
		if responseOnly {
			wantLabels = cat(fill(61, IgnoreIndex), want7[61:], []int32{IgnoreIndex})
		}
		checkRow(t, "labels", b.Labels, 0, 80, wantLabels)
		// Row 3 (batch row 3) is exactly full: no padding at all.
		checkRow(t, "mask", b.Mask, 3, 80, fill(80, 1))
	}
}

func TestSamplePairExamples(t *testing.T) {
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.jsonl")})
	o := sampleOptions(&byteTok{})
	o.MaxSeqLen = 128
	set, err := Build(ds, Train, PhaseReward, o)
	if err != nil {
		t.Fatal(err)
	}
	// First pair is row 1: prompt 59 bytes, chosen 32, rejected " Bologna." 9;
	// "<|endoftext|>" is 13 ordinary bytes: 1+59+32+13 = 105 and 1+59+9+13 = 82.
	p1 := "\n\nHuman: is there a bad word that starts with b\n\nAssistant:"
	wc := enc(p1 + " Um, could you be more specific?<|endoftext|>")
	wr := enc(p1 + " Bologna.<|endoftext|>")
	ex := set.Examples[0]
	if len(wc) != 105 || len(wr) != 82 || !reflect.DeepEqual(ex.IDs, wc) || !reflect.DeepEqual(ex.Rejected, wr) {
		t.Fatalf("row 1 pair: %d/%d ids, want 105/82", len(ex.IDs), len(ex.Rejected))
	}
	// Row 5 (third): 1+48+66+13 = 128 chosen tokens, exactly full.
	if l := len(set.Examples[2].IDs); l != 128 {
		t.Errorf("row 5 chosen has %d ids, want 128", l)
	}
	if st := set.Stats[0]; st.Kept != 10 || st.Truncated != 0 {
		t.Errorf("stats %+v", st)
	}
	c := Collator{T: 128, PAD: tPAD}
	ch, rj, err := c.Pairs(set.Examples)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Labels != nil || rj.Labels != nil || ch.B != 10 || rj.B != 10 {
		t.Fatalf("pair batches: B %d/%d, labels %v/%v", ch.B, rj.B, ch.Labels != nil, rj.Labels != nil)
	}
	checkRow(t, "chosen ids", ch.IDs, 0, 128, cat(wc, fill(23, tPAD)))
	checkRow(t, "chosen mask", ch.Mask, 0, 128, cat(fill(105, 1), fill(23, 0)))
	checkRow(t, "rejected ids", rj.IDs, 0, 128, cat(wr, fill(46, tPAD)))
	checkRow(t, "rejected mask", rj.Mask, 0, 128, cat(fill(82, 1), fill(46, 0)))
	checkRow(t, "chosen mask", ch.Mask, 2, 128, fill(128, 1))

	// At 100 tokens, row 1's chosen is cut (105 -> 100) and its rejected
	// (82) is not; the "<|endoftext|>" tail of the chosen is lost.
	o.MaxSeqLen = 100
	set, err = Build(ds, Train, PhaseReward, o)
	if err != nil {
		t.Fatal(err)
	}
	if ex := set.Examples[0]; !reflect.DeepEqual(ex.IDs, wc[:100]) || !reflect.DeepEqual(ex.Rejected, wr) {
		t.Errorf("truncated pair: %d/%d ids", len(ex.IDs), len(ex.Rejected))
	}
}

func TestSamplePromptExamples(t *testing.T) {
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	set, err := Build(ds, Train, PhasePPO, sampleOptions(&byteTok{}))
	if err != nil {
		t.Fatal(err)
	}
	// Row 20: "\n\nHuman: Can I beat up a furry?\n\nAssistant:" is 43 bytes:
	// 44 tokens, LEFT-padded with 4 PADs to 48.
	p20 := enc("\n\nHuman: Can I beat up a furry?\n\nAssistant:")
	if len(p20) != 44 || !reflect.DeepEqual(set.Examples[0].IDs, p20) {
		t.Fatalf("row 20 prompt: %v", set.Examples[0].IDs)
	}
	c := Collator{T: 48, PAD: tPAD}
	b, err := c.Prompts(set.Examples)
	if err != nil {
		t.Fatal(err)
	}
	if b.B != 7 || b.T != 48 || b.Labels != nil {
		t.Fatalf("prompt batch B=%d T=%d", b.B, b.T)
	}
	checkRow(t, "ids", b.IDs, 0, 48, cat(fill(4, tPAD), p20))
	checkRow(t, "mask", b.Mask, 0, 48, cat(fill(4, 0), fill(44, 1)))
	// Row 14: "\n\nHuman: Can shoot a plan\n\nAssistant:" is 37 bytes: 10 PADs.
	p14 := enc("\n\nHuman: Can shoot a plan\n\nAssistant:")
	checkRow(t, "ids", b.IDs, 1, 48, cat(fill(10, tPAD), p14))
	checkRow(t, "mask", b.Mask, 1, 48, cat(fill(10, 0), fill(38, 1)))
	// Every prompt ends at the last position.
	for r := 0; r < b.B; r++ {
		if b.Mask[r*48+47] != 1 {
			t.Errorf("row %d does not end at T-1", r)
		}
	}
}

func TestSampleEvalPartMissing(t *testing.T) {
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	train, eval, err := Load([]*Dataset{ds}, nil, PhaseSFT, sampleOptions(&byteTok{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(train.Examples) != 4 || len(eval.Examples) != 0 {
		t.Errorf("train %d, eval %d examples", len(train.Examples), len(eval.Examples))
	}
}

func TestSampleBlend(t *testing.T) {
	// Two datasets (the same rows twice) are concatenated then shuffled with
	// Permutation(seed, 8), as DeepSpeed-Chat blends them.
	a := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	b := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.jsonl")})
	o := sampleOptions(&byteTok{})
	train, _, err := Load([]*Dataset{a, b}, nil, PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	cat := append(append([]int64{}, samplePhaseRows[0]...), samplePhaseRows[0]...)
	perm := Permutation(1234, 8)
	for i, ex := range train.Examples {
		if ex.Row != cat[perm[i]] || ex.Dataset != perm[i]/4 {
			t.Errorf("blend %d: row %d of dataset %d, want row %d of %d", i, ex.Row, ex.Dataset, cat[perm[i]], perm[i]/4)
		}
	}
	if len(train.Stats) != 2 {
		t.Errorf("%d stats entries", len(train.Stats))
	}
}
