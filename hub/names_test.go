package hub

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestModelID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1.3b", "facebook/opt-1.3b"},
		{"350m", "facebook/opt-350m"},
		{"125m", "facebook/opt-125m"},
		{"2.7b", "facebook/opt-2.7b"},
		{"6.7b", "facebook/opt-6.7b"},
		{"13b", "facebook/opt-13b"},
		{"30b", "facebook/opt-30b"},
		{"66b", "facebook/opt-66b"},
		{"opt-1.3b", "facebook/opt-1.3b"},
		{"OPT-1.3B", "facebook/opt-1.3b"},
		{"opt-350m", "facebook/opt-350m"},
		{"facebook/opt-1.3b", "facebook/opt-1.3b"},
		{"Dahoas/rm-static", "Dahoas/rm-static"},
		{"175b", "175b"},     // not on the Hub
		{"opt-7b", "opt-7b"}, // no such size
		{"opt-opt-1.3b", "opt-opt-1.3b"},
		{"gpt2", "gpt2"},
		{"", ""},
	} {
		if got := ModelID(c.in); got != c.want {
			t.Errorf("ModelID(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{
		"facebook/opt-1.3b":              true,
		"Dahoas/rm-static":               true,
		"openai/webgpt_comparisons":      true,
		"gpt2":                           true,
		"a/b_c.d-e":                      true,
		"":                               false,
		"a/b/c":                          false,
		"/abs":                           false,
		"org/":                           false,
		"org/-x":                         false,
		"org/x.":                         false,
		"org/a--b":                       false,
		"org/a..b":                       false,
		"../x":                           false,
		"org/with space":                 false,
		"./out/actor":                    false,
		"org/" + strings.Repeat("x", 93): false,
		"org/" + strings.Repeat("x", 92): true,
		"org\\x":                         false,
		"models--org--x":                 false,
	} {
		if err := ValidID(id); (err == nil) != ok {
			t.Errorf("ValidID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}

func TestRepoFolder(t *testing.T) {
	for _, c := range []struct {
		r    Repo
		want string
	}{
		{Repo{Model, "facebook/opt-1.3b"}, "models--facebook--opt-1.3b"},
		{Repo{Dataset, "Dahoas/rm-static"}, "datasets--Dahoas--rm-static"},
		{Repo{Model, "gpt2"}, "models--gpt2"},
	} {
		if got := c.r.Folder(); got != c.want {
			t.Errorf("%v.Folder() = %s, want %s", c.r, got, c.want)
		}
	}
}

func TestEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HF_HUB_CACHE": "/c", "HF_HOME": "/hf", "HOME": "/h"}, "/c"},
		{map[string]string{"HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/hf", "HOME": "/h"}, "/old"},
		{map[string]string{"HF_HOME": "/hf", "HOME": "/h"}, "/hf/hub"},
		{map[string]string{"HF_HOME": "~/hf", "HOME": "/h"}, "/h/hf/hub"},
		{map[string]string{"HF_HUB_CACHE": "$SCRATCH/hub", "SCRATCH": "/s"}, "/s/hub"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/huggingface/hub"},
		{map[string]string{"HOME": "/h"}, "/h/.cache/huggingface/hub"},
	} {
		if got := CacheDir(env(c.env)); got != c.want {
			t.Errorf("CacheDir(%v) = %s, want %s", c.env, got, c.want)
		}
	}
	for v, want := range map[string]bool{"1": true, "true": true, "ON": true, "yes": true, "0": false, "": false, "false": false} {
		if got := Offline(env(map[string]string{"HF_HUB_OFFLINE": v})); got != want {
			t.Errorf("HF_HUB_OFFLINE=%q: offline %v", v, got)
		}
	}
	if !Offline(env(map[string]string{"TRANSFORMERS_OFFLINE": "1"})) {
		t.Error("TRANSFORMERS_OFFLINE=1 not honoured")
	}
	if got := Endpoint(env(nil)); got != "https://huggingface.co" {
		t.Errorf("default endpoint %s", got)
	}
	if got := Endpoint(env(map[string]string{"HF_ENDPOINT": "https://hf-mirror.com/"})); got != "https://hf-mirror.com" {
		t.Errorf("HF_ENDPOINT: %s", got)
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "token"), []byte(" hf_file \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokPath := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tokPath, []byte("hf_path"), 0o600)
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HF_TOKEN": "hf_env", "HF_HOME": home}, "hf_env"},
		{map[string]string{"HUGGING_FACE_HUB_TOKEN": "hf_old", "HF_HOME": home}, "hf_old"},
		{map[string]string{"HF_HOME": home}, "hf_file"},
		{map[string]string{"HF_HOME": home, "HF_TOKEN_PATH": tokPath}, "hf_path"},
		{map[string]string{"HF_HOME": t.TempDir()}, ""},
	} {
		if got := Token(env(c.env)); got != c.want {
			t.Errorf("Token(%v) = %q, want %q", c.env, got, c.want)
		}
	}
}

func TestLookup(t *testing.T) {
	cache := t.TempDir()
	r := Repo{Model, "org/x"}
	commit := strings.Repeat("ab", 20)
	repoDir := filepath.Join(cache, r.Folder())
	os.MkdirAll(filepath.Join(repoDir, "snapshots", commit), 0o755)
	os.MkdirAll(filepath.Join(repoDir, "refs", "refs", "pr"), 0o755)
	os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(commit+"\n"), 0o644)
	os.WriteFile(filepath.Join(repoDir, "refs", "refs", "pr", "1"), []byte(commit), 0o644)
	os.WriteFile(filepath.Join(repoDir, "refs", "bad"), []byte("../../etc"), 0o644)
	for _, rev := range []string{"", "main", commit, "refs/pr/1"} {
		if dir, c, err := Lookup(cache, r, rev); err != nil || c != commit || dir != filepath.Join(repoDir, "snapshots", commit) {
			t.Errorf("Lookup %q: %s %s %v", rev, dir, c, err)
		}
	}
	for _, rev := range []string{"v2", strings.Repeat("cd", 20), "bad", "../x", "refs//x"} {
		if _, _, err := Lookup(cache, r, rev); err == nil {
			t.Errorf("Lookup %q found something", rev)
		}
	}
}

func TestProgress(t *testing.T) {
	var bar, logs bytes.Buffer
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	c := &Client{Progress: &bar, Now: clock, Log: zerolog.New(&logs)}
	p := newProgress(c, "model.safetensors", 2_000_000, 0)
	for i := int64(1); i <= 4; i++ {
		now = now.Add(time.Second)
		p.update(i * 500_000)
	}
	p.finish(2_000_000)
	out := bar.String()
	for _, want := range []string{"\rmodel.safetensors", "[======>   ", " 25%", "500.0 kB / 2.0 MB", "500.0 kB/s", "100%", "2.0 MB / 2.0 MB"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar lacks %q:\n%q", want, out)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("bar does not end its line: %q", out)
	}
	if !strings.Contains(logs.String(), `"message":"downloaded"`) {
		t.Errorf("log: %s", logs.String())
	}
	// Without a terminal: log lines every half minute, no bar.
	logs.Reset()
	c = &Client{Now: clock, Log: zerolog.New(&logs)}
	p = newProgress(c, "x.parquet", 100, 0)
	for i := int64(1); i <= 90; i++ {
		now = now.Add(time.Second)
		p.update(i)
	}
	if n := strings.Count(logs.String(), `"message":"downloading"`); n != 3 {
		t.Errorf("%d progress lines in 90 s, want 3:\n%s", n, logs.String())
	}
	if formatBytes(999) != "999 B" || formatBytes(2_600_000_000) != "2.6 GB" {
		t.Errorf("formatBytes: %s %s", formatBytes(999), formatBytes(2_600_000_000))
	}
}
