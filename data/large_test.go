package data

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// writeRows writes n rows "p<off+i>" / " c<off+i>" / " r<off+i>" as Parquet
// with row groups of 1000 rows, so reads cross row groups and record batches.
func writeRows(t testing.TB, path string, off, n int, bad map[int]string) {
	t.Helper()
	p, c, r := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		p[i], c[i], r[i] = fmt.Sprintf("p%d", off+i), fmt.Sprintf(" c%d", off+i), fmt.Sprintf(" r%d", off+i)
		if s, ok := bad[i]; ok {
			r[i] = s
		}
	}
	rec := record(t, []string{"prompt", "chosen", "rejected"}, strs(p...), strs(c...), strs(r...))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(1000)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestManyRowsAcrossFiles checks row numbering across record batches, row
// groups and files: every example must come from the row the phase split
// names.
func TestManyRowsAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "train-0.parquet"), filepath.Join(dir, "train-1.parquet")
	writeRows(t, a, 0, 5000, nil)
	writeRows(t, b, 5000, 4321, nil)
	ds := fileDataset(rmStatic(t), []string{a, b})
	o := sampleOptions(&batchTok{})
	o.MaxSeqLen, o.MaxPromptLen = 64, 64
	n := 9321
	perm := Permutation(o.Seed, n)
	bounds := o.Split.Bounds(n)
	for k, p := range []Phase{PhaseSFT, PhaseReward, PhasePPO} {
		set, err := Build(ds, Train, p, o)
		if err != nil {
			t.Fatal(err)
		}
		want := perm[bounds[k]:bounds[k+1]]
		if len(set.Examples) != len(want) {
			t.Fatalf("phase %d: %d examples, want %d", p, len(set.Examples), len(want))
		}
		for i, ex := range set.Examples {
			g := want[i]
			text := fmt.Sprintf("p%d", g)
			ids := ex.IDs
			switch p {
			case PhaseSFT:
				text += fmt.Sprintf(" c%d", g)
				if ids[len(ids)-1] != tEOS {
					t.Fatalf("phase 1 example %d does not end with EOS", i)
				}
				ids = ids[:len(ids)-1]
			case PhaseReward:
				text += fmt.Sprintf(" c%d<|endoftext|>", g)
			}
			if ex.Row != int64(g) || string(decodeBytes(ids)) != text {
				t.Fatalf("phase %d example %d: row %d %q, want row %d %q", p, i, ex.Row, decodeBytes(ids), g, text)
			}
		}
	}
	// A bad cell deep in the second file is reported by its file and row.
	writeRows(t, b, 5000, 4321, map[int]string{4100: "bad\xff"})
	_, err := Build(ds, Train, PhasePPO, o)
	if err == nil || !strings.HasPrefix(err.Error(), b+": row 4101: column \"rejected\": invalid UTF-8") {
		t.Errorf("error %v", err)
	}
}

// decodeBytes inverts byteTok (dropping BOS).
func decodeBytes(ids []int32) []byte {
	var out []byte
	for _, id := range ids[1:] {
		out = append(out, byte(id-3))
	}
	return out
}

// BenchmarkBuild measures reading, splitting and building phase-1 examples
// from a 20,000-row Parquet file with the byte tokenizer.
func BenchmarkBuild(b *testing.B) {
	dir := b.TempDir()
	f := filepath.Join(dir, "train.parquet")
	writeRows(b, f, 0, 20000, nil)
	ds := fileDataset(rmStatic(nil), []string{f})
	o := sampleOptions(&batchTok{})
	o.Split = Split{1, 0, 0}
	for b.Loop() {
		if _, err := Build(ds, Train, PhaseSFT, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCacheRead measures loading the same examples from the Arrow cache.
func BenchmarkCacheRead(b *testing.B) {
	dir := b.TempDir()
	f := filepath.Join(dir, "train.parquet")
	writeRows(b, f, 0, 20000, nil)
	ds := fileDataset(rmStatic(nil), []string{f})
	o := cachedOptions(&batchTok{}, filepath.Join(dir, "cache"))
	o.Split = Split{1, 0, 0}
	if _, err := Build(ds, Train, PhaseSFT, o); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Build(ds, Train, PhaseSFT, o); err != nil {
			b.Fatal(err)
		}
	}
}
