package data

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// Token ids of the fake tokenizer: BOS = EOS = 2 as in OPT, PAD = 1.
const (
	tBOS = 2
	tEOS = 2
	tPAD = 1
)

// byteTok is a fake tokenizer that makes expectations computable by hand:
// BOS, then one id per UTF-8 byte, id = byte + 3. It counts its calls.
type byteTok struct {
	calls atomic.Int64
}

func (t *byteTok) Encode(s string) []int32 {
	t.calls.Add(1)
	ids := make([]int32, 0, len(s)+1)
	ids = append(ids, tBOS)
	for i := 0; i < len(s); i++ {
		ids = append(ids, int32(s[i])+3)
	}
	return ids
}

// batchTok adds the optional EncodeBatch path to byteTok.
type batchTok struct {
	byteTok
	batches atomic.Int64
}

func (t *batchTok) EncodeBatch(texts []string) [][]int32 {
	t.batches.Add(1)
	out := make([][]int32, len(texts))
	for i, s := range texts {
		out[i] = t.Encode(s)
	}
	return out
}

// enc is byteTok's encoding without counting, for expectations.
func enc(s string) []int32 {
	var t byteTok
	return t.Encode(s)
}

// sampleFile returns a file of ../shared/data/rm-static-sample. Without it
// the test skips, or fails when CI is set: CI checks out ../shared beside
// the repository, so there a missing file is a broken checkout.
func sampleFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "shared", "data", "rm-static-sample", name)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("shared test data absent under CI, which checks out ../shared beside the repository: %v", err)
		}
		t.Skipf("shared test data absent (%v); CI checks out ../shared beside the repository", err)
	}
	return p
}

// rmStatic returns the Dahoas/rm-static adapter.
func rmStatic(t testing.TB) *Adapter {
	a, ok := Lookup("Dahoas/rm-static")
	if !ok {
		panic("Dahoas/rm-static is not registered")
	}
	return a
}

// fileDataset is a dataset of explicit files.
func fileDataset(a *Adapter, train []string, eval ...string) *Dataset {
	d := &Dataset{Name: "test", Adapter: a, Splits: map[string][]string{a.TrainSplit: train}}
	if len(eval) > 0 {
		d.Splits[a.EvalSplit] = eval
	}
	return d
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeParquet writes a record as a snappy Parquet file.
func writeParquet(t testing.TB, path string, rec arrow.Record) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy)), pqarrow.DefaultWriterProps())
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

// record builds a record from columns of Go values: []*string (nil = null)
// becomes utf8, []int64 int64, []float64 float64.
func record(t testing.TB, names []string, cols ...any) arrow.Record {
	t.Helper()
	mem := memory.DefaultAllocator
	var fields []arrow.Field
	var arrs []arrow.Array
	for i, c := range cols {
		switch v := c.(type) {
		case []*string:
			b := array.NewStringBuilder(mem)
			for _, s := range v {
				if s == nil {
					b.AppendNull()
				} else {
					b.Append(*s)
				}
			}
			arrs = append(arrs, b.NewArray())
			fields = append(fields, arrow.Field{Name: names[i], Type: arrow.BinaryTypes.String, Nullable: true})
		case []int64:
			b := array.NewInt64Builder(mem)
			b.AppendValues(v, nil)
			arrs = append(arrs, b.NewArray())
			fields = append(fields, arrow.Field{Name: names[i], Type: arrow.PrimitiveTypes.Int64})
		case []float64:
			b := array.NewFloat64Builder(mem)
			b.AppendValues(v, nil)
			arrs = append(arrs, b.NewArray())
			fields = append(fields, arrow.Field{Name: names[i], Type: arrow.PrimitiveTypes.Float64})
		default:
			t.Fatalf("record: column %d has type %T", i, c)
		}
	}
	return array.NewRecord(arrow.NewSchema(fields, nil), arrs, -1)
}

// strs turns strings into a nullable string column.
func strs(ss ...string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		out[i] = &ss[i]
	}
	return out
}

// listDir returns the names in dir (none when it does not exist).
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
