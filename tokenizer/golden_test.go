package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// optDir is the OPT tokenizer of the shared data (../shared beside the
// checkout); tests that need it skip when it is absent, or fail when the
// environment variable CI is set (CI checks ../shared out).
var optDir = filepath.Join("..", "..", "shared", "data", "opt-tokenizer")

// loadOPT loads the OPT tokenizer through load (a loading route), once per
// route for the whole test binary.
func loadOPT(t testing.TB, route string) *Tokenizer {
	t.Helper()
	if _, err := os.Stat(optDir); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("OPT tokenizer files not found at %s, and CI is set (CI checks out ../shared beside the repository): %v", optDir, err)
		}
		t.Skipf("OPT tokenizer files not found at %s (the shared data directory beside the checkout): %v", optDir, err)
	}
	optOnce.Do(func() {
		optToks = map[string]*Tokenizer{}
		for name, load := range map[string]func(string) (*Tokenizer, error){"tokenizer.json": LoadTokenizerJSON, "vocab+merges": LoadVocabMerges} {
			tk, err := load(optDir)
			if err != nil {
				optErr = err
				return
			}
			optToks[name] = tk
		}
	})
	if optErr != nil {
		t.Fatal(optErr)
	}
	return optToks[route]
}

var (
	optOnce sync.Once
	optToks map[string]*Tokenizer
	optErr  error
)

var routes = []string{"tokenizer.json", "vocab+merges"}

// goldenCase is a text with the ids a Hugging Face implementation gives it
// (with OPT's BOS).
type goldenCase struct {
	Kind string  `json:"kind"`
	Text string  `json:"text"`
	Hex  string  `json:"hex"`
	IDs  []int32 `json:"ids"`
	// InputIDs is the field name of the shared golden.jsonl.
	InputIDs []int32 `json:"input_ids"`
	// Dec and Decs are the decoded ids (skip_special_tokens false, true)
	// where they differ from the text and from Dec.
	Dec  *string `json:"dec"`
	Decs *string `json:"decs"`
}

func readGolden(t *testing.T, path string) []goldenCase {
	t.Helper()
	cases, err := readGoldenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// readGoldenFile reads JSON lines of goldenCase, gzip-compressed when the
// name ends in .gz.
func readGoldenFile(path string) ([]goldenCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if filepath.Ext(path) == ".gz" {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	var cases []goldenCase
	dec := json.NewDecoder(bufio.NewReader(r))
	for dec.More() {
		var c goldenCase
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("%s: case %d: %w", path, len(cases)+1, err)
		}
		if c.IDs == nil {
			c.IDs = c.InputIDs
		}
		if c.Hex != "" {
			b, err := hex.DecodeString(c.Hex)
			if err != nil {
				return nil, fmt.Errorf("%s: case %d: %w", path, len(cases)+1, err)
			}
			c.Text = string(b)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// checkGolden encodes every case with both loading routes, one at a time
// and as a batch, and checks the ids and the round trip.
func checkGolden(t *testing.T, cases []goldenCase) {
	texts := make([]string, len(cases))
	for i, c := range cases {
		texts[i] = c.Text
	}
	for _, route := range routes {
		tk := loadOPT(t, route)
		batch := tk.EncodeBatch(texts, true, 0)
		bad := 0
		for i, c := range cases {
			got := tk.Encode(c.Text, true)
			if !slices.Equal(got, c.IDs) || !slices.Equal(batch[i], c.IDs) {
				if bad++; bad <= 10 {
					t.Errorf("%s: case %d (%s) %q:\n got %v\nwant %v", route, i+1, c.Kind, c.Text, got, c.IDs)
				}
				continue
			}
			text, err := tk.Decode(got[1:], false)
			want := c.Text
			if c.Hex != "" {
				want = string(appendValidUTF8(nil, []byte(c.Text)))
			}
			if err != nil || text != want {
				if bad++; bad <= 10 {
					t.Errorf("%s: case %d (%s): Decode(Encode(%q)) = %q, %v", route, i+1, c.Kind, c.Text, text, err)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d cases differ", route, bad, len(cases))
		}
	}
}

// TestSharedGolden checks the shared golden.jsonl: texts with the ids of
// Hugging Face's Python tokenizer.
func TestSharedGolden(t *testing.T) {
	loadOPT(t, routes[0])
	checkGolden(t, readGolden(t, filepath.Join(optDir, "golden.jsonl")))
}

// TestJSGolden checks the generated cases (scripts/tokenizer_golden) against
// the ids of @huggingface/tokenizers, Hugging Face's JavaScript port.
func TestJSGolden(t *testing.T) {
	loadOPT(t, routes[0])
	cases := readGolden(t, filepath.Join("testdata", "opt_js_golden.jsonl.gz"))
	if len(cases) < 5000 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	checkGolden(t, cases)
}
