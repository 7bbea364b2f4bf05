package data

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestGroupBlocks(t *testing.T) {
	for _, c := range []struct {
		enc  [][]int32
		size int
		want [][]int32
	}{
		// 7 tokens, blocks of 3: two blocks, the remainder (7) dropped.
		{[][]int32{{1, 2}, {3, 4, 5}, {6, 7}}, 3, [][]int32{{1, 2, 3}, {4, 5, 6}}},
		// Exactly two blocks.
		{[][]int32{{1, 2, 3, 4}}, 2, [][]int32{{1, 2}, {3, 4}}},
		// Fewer tokens than a block: one short block (DeepSpeed-Chat keeps it).
		{[][]int32{{1}, {2}}, 5, [][]int32{{1, 2}}},
		{[][]int32{{}, {}}, 5, nil},
		{nil, 5, nil},
	} {
		if got := groupBlocks(c.enc, c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("groupBlocks(%v, %d) = %v, want %v", c.enc, c.size, got, c.want)
		}
	}
}

func TestLoadUnsupervised(t *testing.T) {
	dir := t.TempDir()
	// 1003 texts "t0".."t1002": groups of 1000 and 3 texts. Each text is
	// BOS + its bytes.
	var b strings.Builder
	var wantTokens [2][]int32
	for i := range 1003 {
		fmt.Fprintf(&b, `{"meta": %d, "text": "t%d"}`+"\n", i, i)
		wantTokens[i/1000] = append(wantTokens[i/1000], enc(fmt.Sprintf("t%d", i))...)
	}
	f := writeFile(t, dir, "train.jsonl", b.String())
	ds, err := Resolve(f, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if col, err := UnsupervisedColumn(ds); err != nil || col != "text" {
		t.Fatalf("column %q %v", col, err)
	}
	o := Options{MaxPromptLen: 6, MaxAnswerLen: 4, Tokenizer: &byteTok{}, CacheDir: t.TempDir(), TokenizerID: "b"}
	set, err := LoadUnsupervised(ds, "", o)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]int32
	for _, g := range wantTokens {
		want = append(want, groupBlocks([][]int32{g}, 10)...)
	}
	if len(set.Examples) != len(want) {
		t.Fatalf("%d blocks, want %d", len(set.Examples), len(want))
	}
	for i, ex := range set.Examples {
		if !reflect.DeepEqual(ex.IDs, want[i]) || ex.Row != -1 {
			t.Fatalf("block %d = %v, want %v", i, ex.IDs, want[i])
		}
	}
	// The last group: "t1000" "t1001" "t1002" = 18 tokens -> one block of 10.
	if last := set.Examples[len(set.Examples)-1].IDs; !reflect.DeepEqual(last, cat(enc("t1000"), enc("t1001"))[:10]) {
		t.Errorf("last block %v", last)
	}
	if st := set.Stats[0]; st.Rows != 1003 || st.Kept != int64(len(want)) {
		t.Errorf("stats %+v", st)
	}
	tok := &byteTok{}
	o.Tokenizer = tok
	again, err := LoadUnsupervised(ds, "", o)
	if err != nil || tok.calls.Load() != 0 || len(again.Examples) != len(set.Examples) {
		t.Errorf("cached unsupervised: %v, %d calls", err, tok.calls.Load())
	}
	c := Collator{T: 10, PAD: tPAD}
	bt, err := c.Blocks(set.Examples[:2])
	if err != nil || !reflect.DeepEqual(bt.Labels, bt.IDs) {
		t.Errorf("blocks batch: %v", err)
	}
	// The first column when there is no "text"; a bad size.
	g := writeFile(t, dir, "g/train.jsonl", `{"body": "x", "n": 1}`)
	gds, _ := Resolve(g, ResolveOptions{})
	if col, _ := UnsupervisedColumn(gds); col != "body" {
		t.Errorf("first column %q", col)
	}
	if _, err := LoadUnsupervised(gds, "", Options{Tokenizer: &byteTok{}}); err == nil {
		t.Error("block size 0 accepted")
	}
	if _, err := LoadUnsupervised(gds, "n", Options{Tokenizer: &byteTok{}, MaxPromptLen: 2}); err == nil {
		t.Error("a number column read as text")
	}
}
