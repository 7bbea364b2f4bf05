package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/data"
)

// The shared test data beside the checkout (../shared).
var (
	dataSampleDir   = filepath.Join("..", "..", "..", "shared", "data", "rm-static-sample")
	dataOPTTokenDir = filepath.Join("..", "..", "..", "shared", "data", "opt-tokenizer")
)

// needShared skips the test when one of dirs (under ../shared) is absent, or
// fails it when the environment variable CI is set: CI checks out ../shared
// beside the repository, so there a missing directory is a broken checkout.
func needShared(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("shared test data absent under CI: %v", err)
			}
			t.Skipf("shared test data absent (%v); CI checks out ../shared beside the repository", err)
		}
	}
}

func TestDataInspectFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want DataInspectOptions
	}{
		{[]string{"Dahoas/rm-static"}, DataInspectOptions{
			Dataset: "Dahoas/rm-static", DataSplit: "2,4,4", Seed: 1234, MaxSeqLen: 512, MaxPromptSeqLen: 256,
			EndText: "<|endoftext|>", Columns: data.ColumnMap{Prompt: "prompt", Chosen: "chosen", Rejected: "rejected"},
			Examples: 3, ChatTemplate: "auto", split: data.Split{2, 4, 4}}},
		{[]string{"x.jsonl", "--tokenizer", "tok", "--data-split", "6,2,2", "--seed", "7", "--max-seq-len", "128",
			"--max-prompt-seq-len", "64", "--add-eot-token", "--end-text", "", "--prompt-column", "q",
			"--chosen-column", "good", "--rejected-column", "", "--examples", "0", "--adapter", "stanfordnlp/SHP", "--chat-template", "none"},
			DataInspectOptions{
				Dataset: "x.jsonl", Tokenizer: "tok", DataSplit: "6,2,2", Seed: 7, MaxSeqLen: 128, MaxPromptSeqLen: 64,
				AddEOTToken: true, Adapter: "stanfordnlp/SHP", Columns: data.ColumnMap{Prompt: "q", Chosen: "good"},
				ChatTemplate: "none", split: data.Split{6, 2, 2}}},
	} {
		var got *DataInspectOptions
		cmd := newDataCmd(&Globals{}, func(o *DataInspectOptions) error { got = o; return nil })
		cmd.SetArgs(append([]string{"inspect"}, c.args...))
		cmd.SetOut(&bytes.Buffer{})
		if err := cmd.Execute(); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		got.g = nil
		if !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%v:\n got %+v\nwant %+v", c.args, *got, c.want)
		}
	}
}

func TestDataUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"data", "inspect"}, "accepts 1 arg"},
		{[]string{"data", "inspect", "a", "b"}, "accepts 1 arg"},
		{[]string{"data", "inspect", "x", "--data-split", "1,2"}, "three parts"},
		{[]string{"data", "inspect", "x", "--data-split", "1,a,2"}, "--data-split"},
		{[]string{"data", "inspect", "x", "--seed", "-1"}, "invalid argument"},
		{[]string{"data", "inspect", "x", "--max-seq-len", "0"}, "--max-seq-len"},
		{[]string{"data", "inspect", "x", "--examples", "-1"}, "--examples"},
		{[]string{"data", "inspect", "x", "--prompt-column", ""}, "--prompt-column"},
		{[]string{"data", "nosuch"}, "unknown command"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, stderr %q; want code %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

func TestDataInspectSample(t *testing.T) {
	needShared(t, dataSampleDir)
	parquet := filepath.Join(dataSampleDir, "sample.parquet")
	out, errOut, code := run(t, "data", "inspect", parquet, "--adapter", "Dahoas/rm-static")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, want := range []string{
		"adapter  Dahoas/rm-static: prompt (string), chosen (string), rejected (string)",
		`train: split "train", 1 file(s), 24 rows`,
		"schema  prompt: utf8, response: utf8, chosen: utf8, rejected: utf8",
		`eval: no "test" split`,
		"(no --tokenizer",
		// The phase split of 24 rows with seed 1234: 4, 10, 10; the first
		// example of phase 1 is row 8 (1-based; index 7 of numpy's permutation).
		"train phase 1 sft, example 1 (row 8):",
		`prompt    "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant:"`,
		"train phase 3 ppo, example 3 (row 12):",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, row := range []string{"1 sft     4     4      0          0         -          -", "2 reward    10    10", "3 ppo    10    10"} {
		if !strings.Contains(out, row) {
			t.Errorf("output lacks the row %q:\n%s", row, out)
		}
	}
}

func TestDataInspectTokenizer(t *testing.T) {
	needShared(t, dataSampleDir, dataOPTTokenDir)
	jsonl := filepath.Join(dataSampleDir, "sample.jsonl")
	out, errOut, code := run(t, "data", "inspect", jsonl, "--adapter", "Dahoas/rm-static", "--tokenizer", dataOPTTokenDir,
		"--max-prompt-seq-len", "16", "--examples", "1")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, want := range []string{
		"token lengths before truncation",
		// OPT: "\n\nHuman:" is 50118 50118 33837 35 after BOS 2; "<|endoftext|>"
		// ends 1116 29015 15483 15698.
		"ids       21 tokens (prompt 18): [2 50118 50118 33837 35 ",
		"1116 29015 15483 15698]",
		"3 ppo    10     9      0          0         1          0",
		"1 > 16",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestDataInspectHubCache resolves a DeepSpeed-Chat name from a hub cache
// laid out in a temporary folder ($HF_HUB_CACHE).
func TestDataInspectHubCache(t *testing.T) {
	needShared(t, dataSampleDir)
	hub := t.TempDir()
	commit := strings.Repeat("0123", 10)
	snap := filepath.Join(hub, "datasets--Dahoas--rm-static", "snapshots", commit)
	if err := os.MkdirAll(filepath.Join(hub, "datasets--Dahoas--rm-static", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hub, "datasets--Dahoas--rm-static", "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{"sample.parquet": "train-00000-of-00001.parquet", "sample.jsonl": "test-00000-of-00001.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dataSampleDir, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(snap, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snap, "data", dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HF_HUB_CACHE", hub)
	out, errOut, code := run(t, "data", "inspect", "Dahoas/rm-static", "--examples", "0")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, want := range []string{"root     " + snap, `train: split "train", 1 file(s), 24 rows`, `eval: split "test", 1 file(s), 24 rows`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "example 1") {
		t.Errorf("--examples 0 printed examples:\n%s", out)
	}
}

func TestDataInspectBadInput(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "train.json")
	if err := os.WriteFile(f, []byte(`{"prompt": "p", "chosen": " c", "rejected": " r"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "data", "inspect", f)
	if code != exitError || !strings.Contains(errOut, f+": line 1:1: the file holds one JSON object") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
	// A malformed row is counted, not fatal, in inspect.
	g := filepath.Join(dir, "rows.jsonl")
	if err := os.WriteFile(g, []byte(`{"prompt": "p", "chosen": " c", "rejected": " r"}`+"\n"+`{"prompt": 3, "chosen": " c", "rejected": " r"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "data", "inspect", g, "--data-split", "1,0,0")
	if code != 0 || !strings.Contains(out, `phase 1 malformed: `+g+`: row 2 (line 2:1): column "prompt": a number, want a string`) {
		t.Errorf("code %d, stderr %q, out:\n%s", code, errOut, out)
	}
	if _, errOut, code := run(t, "data", "inspect", filepath.Join(dir, "none.jsonl")); code != exitError || !strings.Contains(errOut, "none.jsonl") {
		t.Errorf("missing file: code %d, %q", code, errOut)
	}
}

func TestQuoteAndIDList(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	q := quote(long)
	if !strings.Contains(q, "(600 bytes)") || strings.Contains(q, `\x`) {
		t.Errorf("quote cut a rune: %s", q)
	}
	if got := idList([]int32{1, 2, 3}); got != "[1 2 3]" {
		t.Errorf("idList = %s", got)
	}
	ids := make([]int32, 20)
	for i := range ids {
		ids[i] = int32(i)
	}
	if got := idList(ids); got != "[0 1 2 3 4 5 6 7 8 9 10 11 ... 16 17 18 19]" {
		t.Errorf("idList = %s", got)
	}
}

// TestDataRealTokenizer runs the data pipeline with the OPT tokenizer the
// way training commands will: ids as Hugging Face gives them, EOS/PAD from
// the tokenizer, and the cache keyed by a fingerprint of its files.
func TestDataRealTokenizer(t *testing.T) {
	needShared(t, dataSampleDir, dataOPTTokenDir)
	tok, eos, pad, fp, err := loadDataTokenizer(dataOPTTokenDir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if eos != 2 || pad != 1 || len(fp) != 64 {
		t.Fatalf("eos %d pad %d fingerprint %q", eos, pad, fp)
	}
	rm, _ := data.Lookup("Dahoas/rm-static")
	ds := &data.Dataset{Name: "sample", Adapter: rm, Splits: map[string][]string{"train": {filepath.Join(dataSampleDir, "sample.parquet")}}}
	o := data.Options{Seed: 1234, MaxSeqLen: 32, MaxPromptLen: 16, AddEOS: true, EndText: data.DefaultEndText,
		EOS: eos, PAD: pad, Tokenizer: tok, TokenizerID: fp, CacheDir: t.TempDir()}
	set, err := data.Build(ds, data.Train, data.PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	// Row 7: "\n\nHuman: How can I take ammo from the warehouse?\n\nAssistant:" +
	// " Which warehouse?" + EOS: 22 tokens, the prompt 18 (" warehouse" is
	// 12283 both times).
	ex := set.Examples[0]
	want := []int32{2, 50118, 50118, 33837, 35, 1336, 64, 38, 185, 41346, 31, 5, 12283, 116, 50118, 50118, 46184, 35, 6834, 12283, 116, 2}
	if !reflect.DeepEqual(ex.IDs, want) || ex.PromptLen != 18 {
		t.Errorf("row 7: %v (prompt %d)\nwant %v", ex.IDs, ex.PromptLen, want)
	}
	b, err := data.Collator{T: 32, PAD: pad}.SFT(set.Examples[:1])
	if err != nil || b.IDs[22] != 1 || b.Mask[21] != 1 || b.Mask[22] != 0 || b.Labels[21] != 2 || b.Labels[22] != data.IgnoreIndex {
		t.Errorf("batch: %v %v", b, err)
	}
	again, err := data.Build(ds, data.Train, data.PhaseSFT, o)
	if err != nil || !again.Stats[0].Cached || !reflect.DeepEqual(again.Examples[0].IDs, want) {
		t.Errorf("second build: %v cached %v", err, again.Stats[0].Cached)
	}
}
