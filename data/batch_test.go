package data

import (
	"reflect"
	"testing"
)

func TestCollatorSFT(t *testing.T) {
	exs := []Example{
		{IDs: []int32{2, 10, 11, 12, 20, 21, 2}, PromptLen: 4}, // BOS p p p r r EOS
		{IDs: []int32{2, 10, 20}, PromptLen: 2},
		{IDs: []int32{2, 10, 11, 12, 13, 14, 15, 16}, PromptLen: 8}, // prompt fills the row
	}
	I := int32(IgnoreIndex)
	for _, c := range []struct {
		name         string
		pad          int32
		responseOnly bool
		ids, mask    []int32
		labels       []int32
	}{
		{"full loss", 1, false,
			[]int32{2, 10, 11, 12, 20, 21, 2, 1, 2, 10, 20, 1, 1, 1, 1, 1, 2, 10, 11, 12, 13, 14, 15, 16},
			[]int32{1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
			[]int32{2, 10, 11, 12, 20, 21, 2, I, 2, 10, 20, I, I, I, I, I, 2, 10, 11, 12, 13, 14, 15, 16}},
		{"response only", 1, true,
			[]int32{2, 10, 11, 12, 20, 21, 2, 1, 2, 10, 20, 1, 1, 1, 1, 1, 2, 10, 11, 12, 13, 14, 15, 16},
			[]int32{1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
			[]int32{I, I, I, I, 20, 21, 2, I, I, I, 20, I, I, I, I, I, I, I, I, I, I, I, I, I}},
		// PAD equal to BOS/EOS (DeepSpeed-Chat's OPT setting): the mask and
		// labels still tell padding from the real EOS at position 6.
		{"pad == eos", 2, false,
			[]int32{2, 10, 11, 12, 20, 21, 2, 2, 2, 10, 20, 2, 2, 2, 2, 2, 2, 10, 11, 12, 13, 14, 15, 16},
			[]int32{1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
			[]int32{2, 10, 11, 12, 20, 21, 2, I, 2, 10, 20, I, I, I, I, I, 2, 10, 11, 12, 13, 14, 15, 16}},
	} {
		b, err := Collator{T: 8, PAD: c.pad, ResponseOnly: c.responseOnly}.SFT(exs)
		if err != nil {
			t.Fatal(err)
		}
		if b.B != 3 || b.T != 8 {
			t.Errorf("%s: shape %dx%d", c.name, b.B, b.T)
		}
		if !reflect.DeepEqual(b.IDs, c.ids) || !reflect.DeepEqual(b.Mask, c.mask) || !reflect.DeepEqual(b.Labels, c.labels) {
			t.Errorf("%s:\n ids %v\nmask %v\nlabels %v", c.name, b.IDs, b.Mask, b.Labels)
		}
	}
}

// TestSFTTargets: SFTTargets counts the labels of a batch of SFT that
// the model's shift turns into targets (every label but the first of a
// row), with and without ResponseOnly.
func TestSFTTargets(t *testing.T) {
	exs := []Example{
		{IDs: []int32{2, 10, 11, 12, 20, 21, 2}, PromptLen: 4},
		{IDs: []int32{2, 10, 20}, PromptLen: 2},
		{IDs: []int32{2, 10, 11, 12, 13, 14, 15, 16}, PromptLen: 8}, // prompt fills the row
		{IDs: []int32{2, 10, 11}, PromptLen: 3},
		{IDs: []int32{2}, PromptLen: 0},
		{IDs: []int32{2, 10}, PromptLen: 0},
	}
	for _, responseOnly := range []bool{false, true} {
		c := Collator{T: 8, PAD: 1, ResponseOnly: responseOnly}
		b, err := c.SFT(exs)
		if err != nil {
			t.Fatal(err)
		}
		for r, ex := range exs {
			want := 0
			for _, l := range b.Labels[r*b.T+1 : (r+1)*b.T] {
				if l != IgnoreIndex {
					want++
				}
			}
			if got := c.SFTTargets(ex); got != want {
				t.Errorf("response only %v, example %d: SFTTargets %d, want %d", responseOnly, r, got, want)
			}
		}
	}
}

func TestCollatorPromptsLeftPad(t *testing.T) {
	exs := []Example{{IDs: []int32{2, 7, 8}}, {IDs: []int32{2, 9, 9, 9, 9}}, {IDs: []int32{2}}}
	b, err := Collator{T: 5, PAD: 1}.Prompts(exs)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []int32{1, 1, 2, 7, 8, 2, 9, 9, 9, 9, 1, 1, 1, 1, 2}
	wantMask := []int32{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}
	if !reflect.DeepEqual(b.IDs, wantIDs) || !reflect.DeepEqual(b.Mask, wantMask) || b.Labels != nil {
		t.Errorf("ids %v mask %v labels %v", b.IDs, b.Mask, b.Labels)
	}
}

func TestCollatorPairs(t *testing.T) {
	exs := []Example{{IDs: []int32{2, 5, 6}, Rejected: []int32{2, 5}}, {IDs: []int32{2}, Rejected: []int32{2, 7, 7, 7}}}
	ch, rj, err := Collator{T: 4, PAD: 0}.Pairs(exs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ch.IDs, []int32{2, 5, 6, 0, 2, 0, 0, 0}) || !reflect.DeepEqual(ch.Mask, []int32{1, 1, 1, 0, 1, 0, 0, 0}) {
		t.Errorf("chosen %v %v", ch.IDs, ch.Mask)
	}
	if !reflect.DeepEqual(rj.IDs, []int32{2, 5, 0, 0, 2, 7, 7, 7}) || !reflect.DeepEqual(rj.Mask, []int32{1, 1, 0, 0, 1, 1, 1, 1}) {
		t.Errorf("rejected %v %v", rj.IDs, rj.Mask)
	}
}

func TestCollatorBlocks(t *testing.T) {
	exs := []Example{{IDs: []int32{2, 3, 4}}, {IDs: []int32{5}}}
	b, err := Collator{T: 3, PAD: 1}.Blocks(exs)
	if err != nil {
		t.Fatal(err)
	}
	I := int32(IgnoreIndex)
	if !reflect.DeepEqual(b.IDs, []int32{2, 3, 4, 5, 1, 1}) || !reflect.DeepEqual(b.Mask, []int32{1, 1, 1, 1, 0, 0}) ||
		!reflect.DeepEqual(b.Labels, []int32{2, 3, 4, 5, I, I}) {
		t.Errorf("blocks %v %v %v", b.IDs, b.Mask, b.Labels)
	}
}

func TestCollatorErrors(t *testing.T) {
	long := []Example{{IDs: []int32{1, 2, 3}, Rejected: []int32{1}}}
	c := Collator{T: 2}
	if _, err := c.SFT(long); err == nil {
		t.Error("SFT accepted an example longer than T")
	}
	if _, _, err := c.Pairs(long); err == nil {
		t.Error("Pairs accepted an example longer than T")
	}
	if _, err := c.Prompts(long); err == nil {
		t.Error("Prompts accepted an example longer than T")
	}
	if _, err := c.Blocks(long); err == nil {
		t.Error("Blocks accepted an example longer than T")
	}
	if _, err := (Collator{}).SFT(nil); err == nil {
		t.Error("T = 0 accepted")
	}
	b, err := Collator{T: 4}.SFT(nil)
	if err != nil || b.B != 0 || len(b.IDs) != 0 {
		t.Errorf("empty batch: %+v %v", b, err)
	}
}

func TestNewExample(t *testing.T) {
	s := Sample{Prompt: "ab", Chosen: " c", Rejected: " d", PromptChosen: "ab c", PromptRejected: "ab d"}
	o := Options{MaxSeqLen: 5, MaxPromptLen: 2, EndText: "!", AddEOS: true, EOS: 9, Tokenizer: &byteTok{}}
	// Phase 1: BOS a b ' ' c EOS -> cut to 5: the EOS is lost.
	ex, keep, err := NewExample(s, PhaseSFT, o)
	if err != nil || !keep || !reflect.DeepEqual(ex.IDs, []int32{2, 'a' + 3, 'b' + 3, ' ' + 3, 'c' + 3}) || ex.PromptLen != 3 {
		t.Errorf("phase 1: %+v %v %v", ex, keep, err)
	}
	o.MaxSeqLen = 10
	ex, _, _ = NewExample(s, PhaseSFT, o)
	if !reflect.DeepEqual(ex.IDs, []int32{2, 'a' + 3, 'b' + 3, ' ' + 3, 'c' + 3, 9}) {
		t.Errorf("phase 1 with EOS: %v", ex.IDs)
	}
	// Phase 2: texts + EndText.
	ex, _, _ = NewExample(s, PhaseReward, o)
	if !reflect.DeepEqual(ex.IDs, enc("ab c!")) || !reflect.DeepEqual(ex.Rejected, enc("ab d!")) {
		t.Errorf("phase 2: %+v", ex)
	}
	// Phase 3: BOS a b is 3 tokens > 2: dropped.
	if _, keep, _ := NewExample(s, PhasePPO, o); keep {
		t.Error("phase 3 kept a prompt over MaxPromptLen")
	}
	o.MaxPromptLen = 3
	if ex, keep, _ := NewExample(s, PhasePPO, o); !keep || !reflect.DeepEqual(ex.IDs, enc("ab")) {
		t.Errorf("phase 3: %+v %v", ex, keep)
	}
	// A merge across the prompt/response boundary: PromptLen is the common
	// prefix of the two encodings.
	if n := commonPrefix([]int32{2, 5, 6}, []int32{2, 5, 7, 8}); n != 2 {
		t.Errorf("commonPrefix = %d", n)
	}
	for _, bad := range []Options{
		{MaxSeqLen: 1},
		{MaxSeqLen: 0, Tokenizer: &byteTok{}},
		{MaxSeqLen: 1, Tokenizer: &byteTok{}, Split: Split{1, 1}},
	} {
		if _, _, err := NewExample(s, PhaseSFT, bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
	if _, _, err := NewExample(s, PhasePPO, Options{Tokenizer: &byteTok{}}); err == nil {
		t.Error("phase 3 with MaxPromptLen 0 accepted")
	}
	if _, _, err := NewExample(s, Phase(4), o); err == nil {
		t.Error("phase 4 accepted")
	}
}
