package data

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzColumns cover a string, a number and a nested string column.
var fuzzColumns = []Column{
	{"prompt", String, RolePrompt},
	{"score", Number, RoleChosen},
	{"q.text", String, RoleRejected},
}

// checkReader runs every reader entry point on one file and checks the
// invariants: no panic, errors name the file, strings are valid UTF-8, and a
// clean scan sees exactly CountRows rows.
func checkReader(t *testing.T, path string) {
	nameErr := func(what string, err error) {
		if err != nil && !strings.HasPrefix(err.Error(), path) {
			t.Errorf("%s error does not name the file: %v", what, err)
		}
	}
	n, cerr := CountRows(path)
	nameErr("CountRows", cerr)
	_, serr := ReadSchema(path)
	nameErr("ReadSchema", serr)
	var rows, bad int64
	err := ScanRows(path, fuzzColumns, func(row int64, cells []Cell, b error) error {
		if row != rows {
			t.Fatalf("row %d after %d rows", row, rows)
		}
		rows++
		if b != nil {
			bad++
			var re *RowError
			if !errors.As(b, &re) || re.Row != row+1 || re.File != path {
				t.Errorf("bad row error %#v for row %d", b, row)
			}
			return nil
		}
		if len(cells) != len(fuzzColumns) {
			t.Fatalf("%d cells", len(cells))
		}
		for i, c := range cells {
			if fuzzColumns[i].Kind == String && !c.Null && !utf8.ValidString(c.Str) {
				t.Errorf("row %d column %s: invalid UTF-8 %q passed", row, fuzzColumns[i].Name, c.Str)
			}
		}
		return nil
	})
	nameErr("ScanRows", err)
	if err == nil {
		if cerr != nil {
			t.Errorf("ScanRows succeeded where CountRows failed: %v", cerr)
		} else if rows != n {
			t.Errorf("ScanRows saw %d rows, CountRows says %d", rows, n)
		}
	}
	if cerr == nil && err != nil {
		var re *RowError
		if !errors.As(err, &re) {
			t.Errorf("scan error %T %v", err, err)
		}
	}
}

func jsonSeeds(f *testing.F) {
	for _, s := range []string{
		`[{"prompt": "p", "score": 1, "q": {"text": "t"}}]`,
		`[{"prompt": "p", "score": 1.5e3, "q": {"text": "t"}}, {"prompt": null, "score": -2, "q": null}]`,
		`{"prompt": "p", "score": 1, "q": {"text": "t"}}` + "\n" + `{"prompt": "x", "score": 0, "q": {"text": ""}}`,
		`{"prompt": "p", "score": 1, "q": {"text": "t"}}`,
		`{"prompt": "p"}`,
		`[]`, ``, ` `, `[`, `[{}`, `[{"prompt": 1}]`, `"s"`, `[1, 2]`, `[null]`,
		"[{\"prompt\": \"\xff\", \"score\": 1, \"q\": {\"text\": \"t\"}}]",
		"\ufeff[{\"prompt\": \"\\ud800\", \"score\": 1e999, \"q\": {\"text\": 5}}]",
		`[{"prompt": "a"}] x`,
		"{\"prompt\": \"p\", \"score\": 1, \"q\": {\"text\": \"t\"}}\r\n\r\n[1]\n{bad",
	} {
		f.Add([]byte(s))
	}
}

// FuzzJSON feeds arbitrary bytes to the JSON (.json) reader.
func FuzzJSON(f *testing.F) {
	jsonSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		checkReader(t, p)
	})
}

// FuzzJSONL feeds arbitrary bytes to the JSON lines (.jsonl) reader.
func FuzzJSONL(f *testing.F) {
	jsonSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.jsonl")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		checkReader(t, p)
		// Every non-blank line is one row.
		lines := 0
		for _, l := range bytes.Split(bytes.TrimPrefix(b, []byte("\ufeff")), []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines++
			}
		}
		if n, err := CountRows(p); err == nil && int(n) != lines {
			t.Errorf("CountRows = %d for %d non-blank lines", n, lines)
		}
	})
}

// FuzzParquet feeds mutated Parquet files to the Parquet reader: corrupt
// input must give an error naming the file, never a crash.
func FuzzParquet(f *testing.F) {
	p := filepath.Join(f.TempDir(), "seed.parquet")
	writeParquet(f, p, record(f, []string{"prompt", "score", "other"}, strs("p", "q", "\xff"), []float64{1, 2, 3}, strs("x", "y", "z")))
	b, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-10])
	f.Add(b[len(b)-8:])
	if s, err := os.ReadFile(filepath.Join("..", "..", "shared", "data", "rm-static-sample", "sample.parquet")); err == nil {
		f.Add(s)
	}
	cols := []Column{{"prompt", String, RolePrompt}, {"score", Number, RoleChosen}}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-stop:
			case <-time.After(20 * time.Second): // a hang, not a slow input
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic("HANG\n" + string(buf[:n]))
			}
		}()
		_, cerr := CountRows(p)
		_, _ = ReadSchema(p)
		err := ScanRows(p, cols, func(row int64, cells []Cell, bad error) error {
			if bad == nil && !cells[0].Null && !utf8.ValidString(cells[0].Str) {
				t.Errorf("invalid UTF-8 passed")
			}
			return nil
		})
		for _, e := range []error{cerr, err} {
			if e != nil && !strings.HasPrefix(e.Error(), p) {
				t.Errorf("error does not name the file: %v", e)
			}
		}
	})
}
