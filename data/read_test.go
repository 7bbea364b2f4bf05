package data

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

func TestJSONLayouts(t *testing.T) {
	dir := t.TempDir()
	want := []Sample{
		{"P1", " c1", " r1", "P1 c1", "P1 r1"},
		{"P2", " c2", " r2", "P2 c2", "P2 r2"},
	}
	rows := `{"prompt": "P1", "chosen": " c1", "rejected": " r1", "extra": [1, {"x": 2}]}` + "\n" +
		`{"rejected": " r2", "chosen": " c2", "prompt": "P2"}`
	for _, f := range []string{
		writeFile(t, dir, "list.json", "\ufeff[\n "+strings.ReplaceAll(rows, "\n", ",\n ")+"\n]\n"),
		writeFile(t, dir, "lines.jsonl", rows+"\n\n"), // a blank line is skipped
		writeFile(t, dir, "lines.json", rows),         // JSON lines in a .json file
		writeFile(t, dir, "crlf.jsonl", strings.ReplaceAll(rows, "\n", "\r\n")+"\r\n"),
	} {
		got, err := ReadSamples(f, rmStatic(t))
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v", filepath.Base(f), got)
		}
		if n, err := CountRows(f); n != 2 || err != nil {
			t.Errorf("%s: CountRows = %d, %v", filepath.Base(f), n, err)
		}
	}
}

func TestJSONSchema(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "a.json", `[{"b": 1, "a": "x", "q": {"full_text": "t", "id": 3}, "n": null, "l": [1], "t": true}]`)
	got, err := ReadSchema(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{{"b", "number"}, {"a", "string"}, {"q", "object{full_text,id}"}, {"n", "null"}, {"l", "list"}, {"t", "boolean"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema %v", got)
	}
}

// webgptColumns are openai/webgpt_comparisons' columns (a struct column).
func webgptColumns(t *testing.T) []Column {
	return mustLookup(t, "openai/webgpt_comparisons").Columns
}

func TestNestedColumns(t *testing.T) {
	dir := t.TempDir()
	// Parquet with a struct column question{id, full_text}; row 2's struct is null.
	mem := memory.DefaultAllocator
	qType := arrow.StructOf(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "full_text", Type: arrow.BinaryTypes.String})
	qb := array.NewStructBuilder(mem, qType)
	for i, q := range []string{"Why?", "", "How?"} {
		if i == 1 {
			qb.AppendNull()
			continue
		}
		qb.Append(true)
		qb.FieldBuilder(0).(*array.StringBuilder).Append("id")
		qb.FieldBuilder(1).(*array.StringBuilder).Append(q)
	}
	qa := qb.NewArray()
	rest := record(t, []string{"answer_0", "answer_1", "score_0", "score_1"},
		strs("a0 [1]", "x", "b0"), strs("a1", "y", "b1"), []float64{1, 0, -1}, []float64{0, 0, 1})
	fields := append([]arrow.Field{{Name: "question", Type: qType, Nullable: true}}, rest.Schema().Fields()...)
	rec := array.NewRecord(arrow.NewSchema(fields, nil), append([]arrow.Array{qa}, rest.Columns()...), 3)
	pq := filepath.Join(dir, "train.parquet")
	writeParquet(t, pq, rec)
	js := writeFile(t, dir, "train.jsonl",
		`{"question": {"id": "id", "full_text": "Why?"}, "answer_0": "a0 [1]", "answer_1": "a1", "score_0": 1, "score_1": 0}`+"\n"+
			`{"question": null, "answer_0": "x", "answer_1": "y", "score_0": 0, "score_1": 0}`+"\n"+
			`{"question": {"id": "id", "full_text": "How?"}, "answer_0": "b0", "answer_1": "b1", "score_0": -1, "score_1": 1.0}`)
	want := [][]Cell{
		{sc("Why?"), sc("a0 [1]"), sc("a1"), nc(1), nc(0)},
		{nullCell(), sc("x"), sc("y"), nc(0), nc(0)},
		{sc("How?"), sc("b0"), sc("b1"), nc(-1), nc(1)},
	}
	for _, f := range []string{pq, js} {
		var got [][]Cell
		err := ScanRows(f, webgptColumns(t), func(_ int64, cells []Cell, bad error) error {
			if bad != nil {
				return bad
			}
			got = append(got, append([]Cell(nil), cells...))
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: cells %+v", filepath.Base(f), got)
		}
	}
	// Through Build (phase 3 needs only the prompt): the null question is
	// dropped as empty.
	ds := &Dataset{Name: "webgpt", Adapter: mustLookup(t, "openai/webgpt_comparisons"), Splits: map[string][]string{"train": {pq}}}
	o := sampleOptions(&byteTok{})
	o.Split = Split{0, 0, 1}
	set, err := Build(ds, Train, PhasePPO, o)
	if err != nil {
		t.Fatal(err)
	}
	// 9:1 of 3 rows: train gets round(2.7)=3 rows... minus the diff: [0 3 3].
	if st := set.Stats[0]; st.Rows != 3 || st.Empty != 1 || st.Kept != 2 {
		t.Errorf("stats %+v", st)
	}
}

// badCase is a bad input and what its error must name.
type badCase struct {
	name  string
	file  func(t *testing.T, dir string) string
	wants []string // substrings of the error besides the file name
}

func badCases() []badCase {
	good := `{"prompt": "p", "chosen": " c", "rejected": " r"}`
	return []badCase{
		{"missing column jsonl", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.jsonl", good+"\n"+`{"prompt": "p", "chosen": " c"}`+"\n")
		}, []string{"row 2", "line 2", `column "rejected"`, "missing"}},
		{"missing column json", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", "[\n"+good+",\n"+good+",\n"+`{"prompt": "p", "rejected": " r"}`+"\n]")
		}, []string{"row 3", "line 4", `column "chosen"`, "missing"}},
		{"missing column parquet", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "train.parquet")
			writeParquet(t, p, record(t, []string{"prompt", "chosen"}, strs("p"), strs(" c")))
			return p
		}, []string{"row 1", `column "rejected"`, "not found", "prompt, chosen"}},
		{"non-string cell jsonl", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.jsonl", good+"\n"+good+"\n"+`{"prompt": "p", "chosen": 5, "rejected": " r"}`)
		}, []string{"row 3", `column "chosen"`, "a number, want a string"}},
		{"non-string cell json", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", `[`+good+`, {"prompt": ["p"], "chosen": " c", "rejected": " r"}]`)
		}, []string{"row 2", `column "prompt"`, "a list, want a string"}},
		{"non-string cell parquet", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "train.parquet")
			writeParquet(t, p, record(t, []string{"prompt", "chosen", "rejected"}, strs("p", "q"), []int64{1, 2}, strs(" r", " s")))
			return p
		}, []string{"row 1", `column "chosen"`, "int64", "want a string"}},
		{"invalid utf-8 jsonl", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.jsonl", good+"\n"+`{"prompt": "p", "chosen": " c`+"\xff\xfe"+`", "rejected": " r"}`)
		}, []string{"row 2", `column "chosen"`, "invalid UTF-8"}},
		{"invalid utf-8 parquet", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "train.parquet")
			writeParquet(t, p, record(t, []string{"prompt", "chosen", "rejected"}, strs("p", "q", "r"), strs(" c", " d", " e"), strs(" r", " s", " bad\xc3(")))
			return p
		}, []string{"row 3", `column "rejected"`, "invalid UTF-8 at byte 4"}},
		{"empty jsonl", func(t *testing.T, dir string) string { return writeFile(t, dir, "train.jsonl", "") }, []string{"empty file"}},
		{"blank jsonl", func(t *testing.T, dir string) string { return writeFile(t, dir, "train.jsonl", "\n  \n") }, []string{"empty file"}},
		{"empty json", func(t *testing.T, dir string) string { return writeFile(t, dir, "train.json", " \n") }, []string{"empty file"}},
		{"empty json list", func(t *testing.T, dir string) string { return writeFile(t, dir, "train.json", "[ ]") }, []string{"empty file"}},
		{"empty parquet", func(t *testing.T, dir string) string { return writeFile(t, dir, "train.parquet", "") }, []string{"empty file"}},
		{"zero-row parquet", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "train.parquet")
			writeParquet(t, p, record(t, []string{"prompt", "chosen", "rejected"}, strs(), strs(), strs()))
			return p
		}, []string{"empty file"}},
		{"truncated parquet", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "train.parquet")
			writeParquet(t, p, record(t, []string{"prompt", "chosen", "rejected"}, strs("p", "q"), strs(" c", " d"), strs(" r", " s")))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return writeFile(t, dir, "train.parquet", string(b[:len(b)/2]))
		}, []string{"not a readable Parquet file"}},
		{"object instead of list", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", "{\"rows\": ["+good+"]}\n")
		}, []string{"line 1:1", "one JSON object, want a list of objects"}},
		{"json syntax error", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", "[\n"+good+",\n{\"prompt\": \"p\",}\n]")
		}, []string{"line 3:", "invalid JSON"}},
		{"jsonl syntax error", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.jsonl", good+"\n{\"prompt\": \"p\"\n")
		}, []string{"row 2", "line 2", "invalid JSON"}},
		{"jsonl row not an object", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.jsonl", good+"\n[1, 2]\n")
		}, []string{"row 2", "line 2", "the row is a list, want an object"}},
		{"json top-level string", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", `"rows"`)
		}, []string{"want a list of objects"}},
		{"json trailing data", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", "["+good+"]\n[]")
		}, []string{"line 2", "after the closing"}},
		{"json truncated", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "train.json", "["+good+", {\"prompt\": \"p")
		}, []string{"invalid JSON"}},
	}
}

// TestBadInput checks that each bad input fails Build with an error naming
// the file (and the row and column where they apply) and that nothing is
// written to the cache.
func TestBadInput(t *testing.T) {
	for _, c := range badCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := c.file(t, dir)
			cache := filepath.Join(dir, "cache")
			o := sampleOptions(&byteTok{})
			o.CacheDir, o.TokenizerID = cache, "fake"
			o.Split = Split{1, 0, 0}
			ds := fileDataset(rmStatic(t), []string{f})
			_, err := Build(ds, Train, PhaseSFT, o)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, f) {
				t.Errorf("error does not start with the file name %s: %s", f, msg)
			}
			for _, w := range c.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q: %s", w, msg)
				}
			}
			var re *RowError
			if !errors.As(err, &re) {
				t.Errorf("error is %T, not a *RowError", err)
			}
			if names := listDir(t, cache); len(names) != 0 {
				t.Errorf("cache holds %v after a failed build", names)
			}
		})
	}
}

func TestSkipMalformed(t *testing.T) {
	dir := t.TempDir()
	good := `{"prompt": "p", "chosen": " c", "rejected": " r"}`
	f := writeFile(t, dir, "train.jsonl", strings.Join([]string{
		good,
		`{"prompt": "p", "chosen": 5, "rejected": " r"}`,
		`{"prompt": "p", "chosen": null, "rejected": " r"}`,
		`{"prompt": "p",`,
		good,
	}, "\n"))
	o := sampleOptions(&byteTok{})
	o.Split = Split{1, 0, 0}
	o.SkipMalformed = true
	set, err := Build(fileDataset(rmStatic(t), []string{f}), Train, PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	st := set.Stats[0]
	if st.Selected != 5 || st.Kept != 2 || st.Malformed != 2 || st.Empty != 1 || st.Nulls["chosen"] != 1 || len(st.Errors) != 2 {
		t.Errorf("stats %+v", st)
	}
	// The same file without SkipMalformed fails on row 2.
	o.SkipMalformed = false
	if _, err := Build(fileDataset(rmStatic(t), []string{f}), Train, PhaseSFT, o); err == nil || !strings.Contains(err.Error(), "row 2") {
		t.Errorf("strict build: %v", err)
	}
}

func TestRowErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    RowError
		want string
	}{
		{RowError{File: "f.jsonl", Row: 3, Line: 4, Col: 7, Column: "chosen", Err: errors.New("x")}, `f.jsonl: row 3 (line 4:7): column "chosen": x`},
		{RowError{File: "f.parquet", Row: 1, Column: "a.b", Err: errors.New("x")}, `f.parquet: row 1: column "a.b": x`},
		{RowError{File: "f.json", Line: 1, Col: 1, Err: errors.New("x")}, `f.json: line 1:1: x`},
		{RowError{File: "f.json", Err: ErrEmptyFile}, `f.json: empty file (no rows)`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestUnknownExtension(t *testing.T) {
	f := writeFile(t, t.TempDir(), "x.csv", "a,b\n")
	if _, err := CountRows(f); err == nil {
		t.Error("CountRows accepted a .csv file")
	}
	if err := ScanRows(f, nil, nil); err == nil {
		t.Error("ScanRows accepted a .csv file")
	}
}
