package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/tokenizer"
)

// optTokenizerDir is the OPT tokenizer of the shared data (../shared beside
// the checkout).
var optTokenizerDir = filepath.Join("..", "..", "..", "shared", "data", "opt-tokenizer")

// runIn runs gochat with stdin.
func runIn(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestTokenizeFlags(t *testing.T) {
	cases := []struct {
		args []string
		want TokenizeOptions
	}{
		{[]string{"--tokenizer", "d"}, TokenizeOptions{Tokenizer: "d"}},
		{[]string{"--tokenizer", "d", "--text", "", "--no-bos"}, TokenizeOptions{Tokenizer: "d", HasText: true, NoBOS: true}},
		{[]string{"--tokenizer", "d", "--text", "hi there"}, TokenizeOptions{Tokenizer: "d", Text: "hi there", HasText: true}},
		{[]string{"--tokenizer", "d", "--decode", "--skip-special", "--text", "2, 31414"}, TokenizeOptions{Tokenizer: "d", Text: "2, 31414", HasText: true, Decode: true, SkipSpecial: true, ids: []int32{2, 31414}}},
		{[]string{"--tokenizer", "d", "--decode", "--text", ""}, TokenizeOptions{Tokenizer: "d", HasText: true, Decode: true, ids: []int32{}}},
	}
	for _, c := range cases {
		var got *TokenizeOptions
		cmd := newTokenizeCmd(&Globals{}, func(o *TokenizeOptions) error { got = o; return nil })
		cmd.SetArgs(c.args)
		cmd.SetOut(&bytes.Buffer{})
		if err := cmd.Execute(); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		got.g = nil
		if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", c.want) {
			t.Errorf("%v: options %+v, want %+v", c.args, *got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize"}, "--tokenizer is required"},
		{[]string{"tokenize", "--tokenizer", "d", "--skip-special"}, "--skip-special only applies"},
		{[]string{"tokenize", "--tokenizer", "d", "--decode", "--no-bos"}, "--no-bos only applies"},
		{[]string{"tokenize", "--tokenizer", "d", "--decode", "--text", "1,x"}, `"x" is not a token id`},
		{[]string{"tokenize", "--tokenizer", "d", "extra"}, "unknown command"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, stderr %q; want code %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

func TestTokenizeText(t *testing.T) {
	needShared(t, optTokenizerDir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--text", "Hello, my name is"}, "2,31414,6,127,766,16\n"},
		{[]string{"--text", "\n\nHuman:", "--no-bos"}, "50118,50118,33837,35\n"},
		{[]string{"--text", ""}, "2\n"},
		{[]string{"--decode", "--text", "2,31414,6,127,766,16"}, "</s>Hello, my name is\n"},
		{[]string{"--decode", "--skip-special", "--text", "2,31414,6,127,766,16"}, "Hello, my name is\n"},
	} {
		out, errOut, code := run(t, append([]string{"tokenize", "--tokenizer", optTokenizerDir}, c.args...)...)
		if code != 0 || out != c.want {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want %q", c.args, code, out, errOut, c.want)
		}
	}
	_, errOut, code := run(t, "tokenize", "--tokenizer", optTokenizerDir, "--decode", "--text", "2,99999")
	if code != exitError || !strings.Contains(errOut, "99999") {
		t.Errorf("decoding a bad id: code %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(t, "tokenize", "--tokenizer", t.TempDir(), "--text", "x")
	if code != exitError || !strings.Contains(errOut, "neither tokenizer.json nor vocab.json") {
		t.Errorf("empty tokenizer dir: code %d, stderr %q", code, errOut)
	}
}

// TestTokenizeLines runs JSON lines through encoding and decoding, with
// more lines than one batch so that order across batches is checked.
func TestTokenizeLines(t *testing.T) {
	needShared(t, optTokenizerDir)
	tk, err := tokenizer.Load(optTokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Hello, my name is", "\n\nHuman: What is 2+2?\n\nAssistant: 4</s>", "", "日本語 👍🏽 <pad>"}
	for i := len(texts); i < tokenizeBatchLines+100; i++ {
		texts = append(texts, fmt.Sprintf("line %d says %s", i, strings.Repeat("ha", i%7)))
	}
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(map[string]string{"text": s, "other": "ignored"})
		in.Write(b)
		in.WriteString("\r\n")
	}
	out, errOut, code := runIn(t, in.String(), "--threads", "2", "tokenize", "--tokenizer", optTokenizerDir)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%d output lines for %d input lines", len(lines), len(texts))
	}
	var back strings.Builder
	for i, l := range lines {
		var got struct{ IDs []int32 }
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %d: %q: %v", i+1, l, err)
		}
		if want := tk.Encode(texts[i], true); !slices.Equal(got.IDs, want) {
			t.Fatalf("line %d: ids %v, want %v", i+1, got.IDs, want)
		}
		back.WriteString(l + "\n")
	}
	if lines[0] != `{"ids":[2,31414,6,127,766,16]}` {
		t.Errorf("first line %s", lines[0])
	}

	out, errOut, code = runIn(t, back.String(), "tokenize", "--tokenizer", optTokenizerDir, "--decode", "--skip-special")
	if code != 0 {
		t.Fatalf("decode: code %d: %s", code, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	for i, want := range texts {
		var got struct{ Text string }
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("decoded line %d: %v", i+1, err)
		}
		if want = strings.NewReplacer("</s>", "", "<pad>", "").Replace(want); got.Text != want {
			t.Fatalf("decoded line %d: %q, want %q", i+1, got.Text, want)
		}
	}
	if !strings.Contains(out, `{"text":"Hello, my name is"}`) || strings.Contains(out, `\u003c`) {
		t.Errorf("decoded output starts %.100q", out)
	}
}

func TestTokenizeBadLines(t *testing.T) {
	needShared(t, optTokenizerDir)
	for _, c := range []struct {
		name, in string
		args     []string
		want     string
		good     int // output lines written before the error
	}{
		{"bad JSON", "{\"text\": \"a\"}\n{\"text\": \n", nil, "stdin line 2", 1},
		{"no text", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n", nil, `stdin line 2: no "text" field`, 1},
		{"not a string", `{"text": 5}`, nil, "stdin line 1", 0},
		{"empty line", "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n", nil, "stdin line 2: empty line", 1},
		{"invalid UTF-8", "{\"text\": \"a\"}\n{\"text\": \"\xff\"}\n", nil, "stdin line 2: invalid UTF-8", 1},
		{"decode: bad id", "{\"ids\": [2]}\n{\"ids\": [2, -1]}\n", []string{"--decode"}, "stdin line 2", 1},
		{"decode: no ids", `{"text": "a"}`, []string{"--decode"}, `stdin line 1: no "ids" field`, 0},
		{"decode: not ints", `{"ids": ["a"]}`, []string{"--decode"}, "stdin line 1", 0},
	} {
		out, errOut, code := runIn(t, c.in, append([]string{"tokenize", "--tokenizer", optTokenizerDir}, c.args...)...)
		if code != exitError || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: code %d, stderr %q; want code %d and %q", c.name, code, errOut, exitError, c.want)
		}
		if n := strings.Count(out, "\n"); n != c.good {
			t.Errorf("%s: %d lines written before the error, want %d: %q", c.name, n, c.good, out)
		}
	}
	// No trailing newline, and no input at all, are fine.
	for in, want := range map[string]string{`{"text": "a"}`: `{"ids":[2,102]}` + "\n", "": ""} {
		out, errOut, code := runIn(t, in, "tokenize", "--tokenizer", optTokenizerDir)
		if code != 0 || out != want {
			t.Errorf("stdin %q: code %d, stdout %q, stderr %q; want %q", in, code, out, errOut, want)
		}
	}
}
