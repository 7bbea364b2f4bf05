package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"

	sgbpe "github.com/sugarme/tokenizer/model/bpe"
	sgpretok "github.com/sugarme/tokenizer/pretokenizer"
	sgpretrained "github.com/sugarme/tokenizer/pretrained"
)

// github.com/sugarme/tokenizer v0.3.0 is a second opinion where it is right
// (the byte alphabet, reading vocab.json and merges.txt) and a record of
// where it is wrong for OPT (REFERENCE.md §2), which is why gochat has its
// own pre-tokenizer, merge loop and added-token split (see the package
// documentation).

// TestSugarmeAgrees checks the parts gochat could have taken from sugarme.
func TestSugarmeAgrees(t *testing.T) {
	for b, r := range byteLevelAlphabet() {
		if got := sgpretok.BytesChar[uint8(b)]; got != string(r) {
			t.Errorf("byte %#02x: gochat %q, sugarme %q", b, r, got)
		}
	}
	tk := loadOPT(t, "vocab+merges")
	m, err := sgbpe.NewBpeFromFiles(filepath.Join(optDir, fileVocab), filepath.Join(optDir, fileMerges))
	if err != nil {
		t.Fatal(err)
	}
	for tok, id := range *m.Vocab {
		if got, ok := tk.TokenID(tok); !ok || int(got) != id {
			t.Errorf("token %q: gochat id %d (%v), sugarme %d", tok, got, ok, id)
		}
	}
	bm := tk.model.(*byteLevelBPE).merges
	if len(*m.Merges) != 50000 {
		t.Errorf("sugarme read %d merges, want 50000", len(*m.Merges))
	}
	for p, v := range *m.Merges {
		if rank, id := bm.get(int32(p.C1), int32(p.C2)); int(rank) != v.Rank || int(id) != v.NewId {
			t.Errorf("merge %d %d: gochat rank %d id %d, sugarme rank %d id %d", p.C1, p.C2, rank, id, v.Rank, v.NewId)
		}
	}
}

// TestSugarmeDefects shows the three places where sugarme's tokenizer
// (loaded from the same tokenizer.json) gives other ids than Hugging Face:
// its ByteLevel split lacks the whitespace lookahead, its merge order
// ignores position, and it drops special tokens found in the text.
func TestSugarmeDefects(t *testing.T) {
	tk := loadOPT(t, "tokenizer.json")
	sg, err := sgpretrained.FromFile(filepath.Join(optDir, fileTokenizerJSON))
	if err != nil {
		t.Fatal(err)
	}
	sgEncode := func(s string) []int32 {
		e, err := sg.EncodeSingle(s, true)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int32, len(e.Ids))
		for i, id := range e.Ids {
			ids[i] = int32(id)
		}
		return ids
	}
	for _, c := range []struct {
		defect, text string
		want         []int32 // Hugging Face
	}{
		{"whitespace lookahead", "\n\nHuman:", []int32{2, 50118, 50118, 33837, 35}},
		{"merge order", " 1000", []int32{2, 10775}},
		{"special tokens in text", "a</s>b", []int32{2, 102, 2, 428}},
	} {
		got, sgIDs := tk.Encode(c.text, true), sgEncode(c.text)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: gochat %v, want %v", c.defect, got, c.want)
		}
		if slices.Equal(sgIDs, c.want) {
			t.Errorf("%s: sugarme now gives the Hugging Face ids for %q; if a newer version fixed this, update the package documentation", c.defect, c.text)
		}
	}
	// How often it matters: the dialogue texts of the shared golden file.
	cases := readGolden(t, filepath.Join(optDir, "golden.jsonl"))
	same := 0
	for _, c := range cases {
		if slices.Equal(sgEncode(c.Text), c.IDs) {
			same++
		}
	}
	t.Logf("sugarme v0.3.0 gives the Hugging Face ids for %d of %d golden texts; gochat for all", same, len(cases))
}
