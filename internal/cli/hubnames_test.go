package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/hub/hubtest"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
)

// fakeHub starts a fake Hub and points the environment at it with an empty
// cache, online and without a token; it returns the server and the cache.
func fakeHub(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	s := hubtest.New(t)
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", s.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	return s, cache
}

// readFiles reads the named files of dir, keyed by name.
func readFiles(t *testing.T, dir string, names ...string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	return files
}

// TestHubModelDownloadAndLoad: `gochat generate --model ORG/NAME` downloads
// a tiny OPT from a fake Hub into the cache in transformers' layout, the
// model loads from the snapshot path with model.Load and generates what
// the original directory does, and later runs read the cache offline.
func TestHubModelDownloadAndLoad(t *testing.T) {
	preln := filepath.Join("..", "..", "model", "testdata", "golden", "preln")
	s, cache := fakeHub(t)
	commit := s.Add("model", "org/tiny-opt", "main", readFiles(t, preln, "config.json", "model.safetensors"))
	gen := func(m string) string {
		t.Helper()
		out, errOut, code := run(t, "--log-format", "json", "generate", "--model", m, "--prompt-ids", "2,10,20,30", "--max-new-tokens", "5", "--json")
		if code != 0 {
			t.Fatalf("generate --model %s: code %d: %s", m, code, errOut)
		}
		return out
	}
	want := gen(preln)
	if got := gen("org/tiny-opt"); got != want {
		t.Errorf("downloaded model generates %s, the original %s", got, want)
	}

	// The layout transformers reads: refs/main names the snapshot, whose
	// files are relative links into blobs/.
	repoDir := filepath.Join(cache, "models--org--tiny-opt")
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != commit {
		t.Fatalf("refs/main = %q (%v), want %s", ref, err, commit)
	}
	snap := filepath.Join(repoDir, "snapshots", string(ref))
	for _, f := range []string{"config.json", "model.safetensors"} {
		target, err := os.Readlink(filepath.Join(snap, f))
		if err != nil || filepath.IsAbs(target) || !strings.HasPrefix(target, filepath.Join("..", "..", "blobs")+string(filepath.Separator)) {
			t.Errorf("%s -> %q (%v), want a relative link into ../../blobs/", f, target, err)
		}
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	a, err := model.Load(dev, snap, model.LoadOptions{})
	if err != nil {
		t.Fatalf("model.Load from the snapshot: %v", err)
	}
	b, err := model.Load(dev, preln, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := make([]float32, a.NumParams()), make([]float32, b.NumParams())
	dev.ReadF32(pa, a.Params.Flat)
	dev.ReadF32(pb, b.Params.Flat)
	if !slices.Equal(pa, pb) {
		t.Error("the downloaded weights differ from the original's")
	}

	// Offline and with the Hub gone, the cache serves it.
	s.Close()
	t.Setenv("HF_HUB_OFFLINE", "1")
	if got := gen("org/tiny-opt"); got != want {
		t.Errorf("cached model generates %s, the original %s", got, want)
	}
}

// TestHubOfflineError: an offline run that names a model the cache lacks
// fails before it touches --output-dir, saying what to do.
func TestHubOfflineError(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "1")
	want := "HF_HUB_OFFLINE=1 and facebook/opt-350m (revision main) is not in the cache at " + cache + "; run once online or unset HF_HUB_OFFLINE"
	_, errOut, code := run(t, "generate", "--model", "350m", "--prompt-ids", "2")
	if code != exitError || !strings.Contains(errOut, want) {
		t.Errorf("code %d, stderr %q; want %q", code, errOut, want)
	}
	out := filepath.Join(t.TempDir(), "sft")
	// The memory pre-flight runs before names are resolved (so nothing is
	// downloaded for a run that cannot fit) and would refuse a full
	// fine-tune of opt-1.3b first; this checks the resolution.
	_, errOut, code = run(t, "sft", "--model", "opt-1.3b", "--output-dir", out, "--skip-preflight")
	if code != exitError || !strings.Contains(errOut, "facebook/opt-1.3b (revision main) is not in the cache") {
		t.Errorf("sft: code %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("sft created --output-dir for a model it could not find")
	}
}

// TestHubGatedError: a gated model without HF_TOKEN fails with the
// repository's name and what to do; with it, the model is fetched.
func TestHubGatedError(t *testing.T) {
	preln := filepath.Join("..", "..", "model", "testdata", "golden", "preln")
	s, _ := fakeHub(t)
	s.Token = "hf_test"
	s.Add("model", "meta/gated-opt", "main", readFiles(t, preln, "config.json", "model.safetensors"))
	s.Gate("model", "meta/gated-opt")
	args := []string{"--log-format", "json", "generate", "--model", "meta/gated-opt", "--prompt-ids", "2", "--max-new-tokens", "1"}
	_, errOut, code := run(t, args...)
	if code != exitError || !strings.Contains(errOut, "meta/gated-opt (revision main) is gated or private") || !strings.Contains(errOut, "set HF_TOKEN") {
		t.Errorf("no token: code %d, stderr %q", code, errOut)
	}
	t.Setenv("HF_TOKEN", "hf_test")
	if _, errOut, code := run(t, args...); code != 0 {
		t.Errorf("with HF_TOKEN: code %d, stderr %q", code, errOut)
	}
}

// TestHubDataInspectDownload: `gochat data inspect Dahoas/rm-static`
// fetches the dataset's Parquet files from a fake Hub into the cache.
func TestHubDataInspectDownload(t *testing.T) {
	needShared(t, dataSampleDir)
	s, cache := fakeHub(t)
	commit := s.Add("dataset", "Dahoas/rm-static", "main", map[string][]byte{
		"data/train-00000-of-00001-0123.parquet": readFiles(t, dataSampleDir, "sample.parquet")["sample.parquet"],
		"data/test-00000-of-00001-4567.parquet":  readFiles(t, dataSampleDir, "sample.parquet")["sample.parquet"],
		"README.md":                              []byte("---\nlicense: mit\n---\n"),
	})
	out, errOut, code := run(t, "--log-format", "json", "data", "inspect", "Dahoas/rm-static", "--examples", "0")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	snap := filepath.Join(cache, "datasets--Dahoas--rm-static", "snapshots", commit)
	for _, want := range []string{"root     " + snap, `train: split "train", 1 file(s), 24 rows`, `eval: split "test", 1 file(s), 24 rows`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "fetching from the Hub") {
		t.Errorf("no log of the download: %s", errOut)
	}
	if _, errOut, code := run(t, "data", "inspect", "Dahoas/rm-static", "--revision", "nope"); code != exitError ||
		!strings.Contains(errOut, `dataset Dahoas/rm-static has no revision "nope"`) {
		t.Errorf("bad --revision: code %d, %s", code, errOut)
	}
}

// TestHubFlags: --revision and --data-revision reach the options, --data
// defaults to Dahoas/rm-static, the tokenizer to the model name, and an
// unset revision leaves a run's fingerprint as it was.
func TestHubFlags(t *testing.T) {
	g := &Globals{}
	for _, c := range []struct {
		name string
		cmd  func(func(*StageOptions) error) any
	}{
		{"sft", func(f func(*StageOptions) error) any { return newSFTCmd(g, f) }},
		{"reward", func(f func(*StageOptions) error) any { return newRewardCmd(g, f) }},
	} {
		var got *StageOptions
		cmd := c.cmd(func(o *StageOptions) error { got = o; return nil }).(interface {
			SetArgs([]string)
			Execute() error
		})
		cmd.SetArgs([]string{"--model", "1.3b", "--output-dir", "o", "--revision", "v1", "--data-revision", "r2"})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(got.Data, []string{"Dahoas/rm-static"}) || got.Revision != "v1" || got.DataRevision != "r2" || got.Tokenizer != "1.3b" {
			t.Errorf("%s: data %v revision %q data revision %q tokenizer %q", c.name, got.Data, got.Revision, got.DataRevision, got.Tokenizer)
		}
		b, _ := json.Marshal(&StageOptions{Model: "m"})
		if strings.Contains(string(b), "revision") {
			t.Errorf("%s: an unset revision changes the fingerprint: %s", c.name, b)
		}
	}
	var p *PPOOptions
	pc := newPPOCmd(g, func(o *PPOOptions) error { p = o; return nil })
	pc.SetArgs([]string{"--actor", "a", "--critic", "c", "--output-dir", "o", "--revision", "v1"})
	if err := pc.Execute(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Data, []string{"Dahoas/rm-static"}) || p.Revision != "v1" {
		t.Errorf("ppo: data %v revision %q", p.Data, p.Revision)
	}
	if b, _ := json.Marshal(&PPOOptions{}); strings.Contains(string(b), "Revision") {
		t.Errorf("ppo: an unset revision changes the fingerprint: %s", b)
	}
	var gen *GenerateOptions
	gc := newGenerateCmd(g, func(o *GenerateOptions) error { gen = o; return nil })
	gc.SetArgs([]string{"--model", "facebook/opt-125m", "--prompt-ids", "2", "--revision", "abc"})
	if err := gc.Execute(); err != nil || gen.Revision != "abc" {
		t.Errorf("generate: %v %+v", err, gen)
	}
	var ch *ChatOptions
	cc := newChatCmd(g, func(o *ChatOptions) error { ch = o; return nil })
	cc.SetArgs([]string{"--model", "350m", "--revision", "v2"})
	if err := cc.Execute(); err != nil || ch.Revision != "v2" {
		t.Errorf("chat: %v %+v", err, ch)
	}
	var sc *ScoreOptions
	scc := newScoreCmd(g, func(o *ScoreOptions) error { sc = o; return nil })
	scc.SetArgs([]string{"--model", "350m", "--answer", "a", "--revision", "v3"})
	if err := scc.Execute(); err != nil || sc.Revision != "v3" {
		t.Errorf("score: %v %+v", err, sc)
	}
	var tr *TrainOptions
	tc := newTrainCmd(g, func(o *TrainOptions) error { tr = o; return nil })
	tc.SetArgs([]string{"--actor", "1.3b", "--reward", "350m", "--output-dir", "o", "--revision", "v1", "--data-revision", "r2", "--recipe", "none"})
	if err := tc.Execute(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(tr.stepArgs("sft", "--model", tr.Actor), " ")
	if !strings.Contains(args, "--revision v1") || !strings.Contains(args, "--data-revision r2") || strings.Contains(args, "--data ") {
		t.Errorf("train passes %q to step 1", args)
	}
}

// TestPreflightBeforeDownload: `gochat sft` and `gochat ppo` on Hub ids
// whose architectures gochat knows (built-in opt-*) run the memory
// pre-flight before resolving them, so a run that cannot fit is refused
// without a single request to the Hub; one that fits then downloads.
func TestPreflightBeforeDownload(t *testing.T) {
	s, cache := fakeHub(t)
	data := filepath.Join("..", "..", "..", "shared", "data", "rm-static-sample", "sample.jsonl")
	for _, args := range [][]string{
		{"sft", "--model", "facebook/opt-1.3b", "--data", data, "--dtype", "fp32"},
		{"ppo", "--actor", "opt-1.3b", "--critic", "350m", "--data", data, "--dtype", "fp32"},
	} {
		s.Reset()
		_, errOut, code := runMem(t, 8<<30, append(args, "--output-dir", t.TempDir())...)
		if code != 2 || !strings.Contains(errOut, "does not fit in memory") {
			t.Errorf("%v: code %d, %q; want a pre-flight refusal", args, code, errOut)
		}
		if r := s.Requests(); len(r) != 0 {
			t.Errorf("%v: %d requests to the Hub before the refusal, the first %+v", args, len(r), r[0])
		}
		if entries, _ := os.ReadDir(cache); len(entries) != 0 {
			t.Errorf("%v: the cache holds %d entries", args, len(entries))
		}
	}
	// A model the planner cannot know without its config.json is planned
	// after the download.
	preln := filepath.Join("..", "..", "model", "testdata", "golden", "preln")
	s.Add("model", "org/tiny-opt", "main", readFiles(t, preln, "config.json", "model.safetensors"))
	_, errOut, code := runMem(t, 1<<20, "sft", "--model", "org/tiny-opt", "--tokenizer", filepath.Join("..", "..", "..", "shared", "data", "opt-tokenizer"),
		"--data", data, "--max-seq-len", "16", "--output-dir", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "does not fit in memory") || len(s.Requests()) == 0 {
		t.Errorf("org/tiny-opt with 1 MiB: code %d, %d requests, %q; want a download, then a refusal", code, len(s.Requests()), errOut)
	}
}
