package hub

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gochat-ai/gochat/hub/hubtest"
)

// env returns a getenv over a map.
func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// newClient returns a client of the fake Hub with an empty cache and no
// pause between retries.
func newClient(t *testing.T, s *hubtest.Server) *Client {
	t.Helper()
	return &Client{Cache: t.TempDir(), Endpoint: s.URL, RetryWait: -1}
}

// noise returns n reproducible pseudo-random bytes.
func noise(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tinyRepo is a model repository with what gochat reads and what it must
// not fetch.
func tinyRepo() map[string][]byte {
	return map[string][]byte{
		"config.json":            []byte(`{"model_type": "opt"}`),
		"generation_config.json": []byte(`{}`),
		"vocab.json":             []byte(`{"a": 0}`),
		"merges.txt":             []byte("#version: 0.2\n"),
		"tokenizer_config.json":  []byte(`{}`),
		"model.safetensors":      noise(50_000, 1),
		"pytorch_model.bin":      noise(1000, 2),
		"flax_model.msgpack":     noise(1000, 3),
		"tf_model.h5":            noise(1000, 4),
		"onnx/model.onnx":        noise(1000, 5),
		"README.md":              []byte("# tiny"),
		".gitattributes":         []byte("*.bin filter=lfs\n"),
	}
}

// fetched lists the files of a snapshot (relative, '/'-separated).
func fetched(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// incomplete lists .incomplete files under the cache.
func incomplete(t *testing.T, cache string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(cache, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".incomplete") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestDownloadLayout downloads a model and checks the cache layout against
// huggingface_hub's: refs/main holds the snapshot's commit, snapshot files
// are relative links to blobs named by ETag (sha256 for LFS files, the git
// blob id otherwise), only what gochat reads is fetched, absent tokenizer
// files are recorded under .no_exist. A second client then finds it with
// the server gone.
func TestDownloadLayout(t *testing.T) {
	s := hubtest.New(t)
	files := tinyRepo()
	commit := s.Add("model", "org/tiny", "main", files)
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(c.Cache, "models--org--tiny")
	if want := filepath.Join(repoDir, "snapshots", commit); dir != want {
		t.Fatalf("dir %s, want %s", dir, want)
	}
	if b, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(b) != commit {
		t.Errorf("refs/main = %q (%v), want %q exactly", b, err, commit)
	}
	want := []string{"config.json", "generation_config.json", "merges.txt", "model.safetensors", "tokenizer_config.json", "vocab.json"}
	if got := fetched(t, dir); !slices.Equal(got, want) {
		t.Errorf("snapshot holds %v, want %v", got, want)
	}
	for _, f := range want {
		p := filepath.Join(dir, f)
		target, err := os.Readlink(p)
		if err != nil {
			t.Errorf("%s is not a symbolic link: %v", f, err)
			continue
		}
		etag := hubtest.GitBlobID(files[f])
		if f == "model.safetensors" {
			etag = hubtest.SHA256(files[f])
		}
		if wantT := filepath.Join("..", "..", "blobs", etag); target != wantT {
			t.Errorf("%s -> %s, want %s", f, target, wantT)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, files[f]) {
			t.Errorf("%s content differs (%v)", f, err)
		}
	}
	for _, f := range []string{"tokenizer.json", "special_tokens_map.json", "added_tokens.json"} {
		if !exists(filepath.Join(repoDir, ".no_exist", commit, f)) {
			t.Errorf(".no_exist/%s/%s missing", commit, f)
		}
	}
	if exists(filepath.Join(repoDir, ".no_exist", commit, "vocab.json")) {
		t.Errorf(".no_exist records vocab.json, which the repository has")
	}
	if inc := incomplete(t, c.Cache); len(inc) > 0 {
		t.Errorf("left behind: %v", inc)
	}
	for _, r := range s.Requests() {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("%s %s carried a token though none was set", r.Method, r.Path)
		}
		if r.Server == "cdn" && r.Header.Get("Range") != "" {
			t.Errorf("a first download sent Range %s", r.Header.Get("Range"))
		}
	}

	// Cache hit: no network. The server is closed, so any request would fail.
	s.Close()
	for _, name := range []string{"org/tiny", "org/tiny"} {
		again := &Client{Cache: c.Cache, Endpoint: s.URL}
		got, err := again.Model(context.Background(), name, "main")
		if err != nil || got != dir {
			t.Fatalf("cache hit: %s, %v; want %s", got, err, dir)
		}
	}
}

// TestResume drops the connection in the middle of an LFS file: the retry
// asks for the rest with Range and the blob is whole and sha256-checked.
// An .incomplete file left by an earlier run is resumed the same way.
func TestResume(t *testing.T) {
	s := hubtest.New(t)
	files := tinyRepo()
	weights := files["model.safetensors"]
	s.Add("model", "org/tiny", "main", files)
	s.DropAfter("model.safetensors", 20_000)
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	var ranges []string
	for _, r := range s.Requests() {
		if r.Server == "cdn" {
			ranges = append(ranges, r.Header.Get("Range"))
		}
	}
	if !slices.Equal(ranges, []string{"", "bytes=20000-"}) {
		t.Errorf("CDN requests with Range %q, want a full GET then bytes=20000-", ranges)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); err != nil || !bytes.Equal(b, weights) {
		t.Errorf("resumed file differs (%v)", err)
	}

	// An earlier run's partial blob: the first 30000 bytes are there.
	c2 := newClient(t, s)
	blobs := filepath.Join(c2.Cache, "models--org--tiny", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := hubtest.SHA256(weights)
	if err := os.WriteFile(filepath.Join(blobs, sum+".incomplete"), weights[:30_000], 0o644); err != nil {
		t.Fatal(err)
	}
	s.Reset()
	if dir, err = c2.Model(context.Background(), "org/tiny", ""); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Requests() {
		if r.Server == "cdn" && r.Header.Get("Range") != "bytes=30000-" {
			t.Errorf("resuming an earlier run sent Range %q, want bytes=30000-", r.Header.Get("Range"))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); err != nil || !bytes.Equal(b, weights) {
		t.Errorf("file resumed from an earlier run differs (%v)", err)
	}
}

// TestCorrupt: content whose sha256 is not the X-Linked-Etag is refused and
// discarded, neither linked into the snapshot nor recorded as main; a
// corrupt .incomplete prefix from an earlier run is caught the same way.
func TestCorrupt(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		s := hubtest.New(t)
		files := tinyRepo()
		commit := s.Add("model", "org/tiny", "main", files)
		c := newClient(t, s)
		repoDir := filepath.Join(c.Cache, "models--org--tiny")
		sum := hubtest.SHA256(files["model.safetensors"])
		if earlier {
			bad := slices.Clone(files["model.safetensors"][:100])
			bad[7] ^= 1
			os.MkdirAll(filepath.Join(repoDir, "blobs"), 0o755)
			if err := os.WriteFile(filepath.Join(repoDir, "blobs", sum+".incomplete"), bad, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			s.Corrupt("model.safetensors")
		}
		_, err := c.Model(context.Background(), "org/tiny", "")
		if err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), "org/tiny") {
			t.Fatalf("earlier=%v: error %v, want a sha256 mismatch naming the repo", earlier, err)
		}
		snap := filepath.Join(repoDir, "snapshots", commit)
		for _, p := range []string{filepath.Join(snap, "model.safetensors"), filepath.Join(repoDir, "blobs", sum),
			filepath.Join(repoDir, "refs", "main")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("earlier=%v: %s exists after a corrupt download", earlier, p)
			}
		}
		if inc := incomplete(t, c.Cache); len(inc) > 0 {
			t.Errorf("earlier=%v: corrupt partial download kept: %v", earlier, inc)
		}
	}
}

// TestRevision: a branch is recorded as refs/<branch>; a commit hash names
// its snapshot directly (no ref); both are then found offline.
func TestRevision(t *testing.T) {
	s := hubtest.New(t)
	files := tinyRepo()
	c1 := s.Add("model", "org/tiny", "main", files)
	files["config.json"] = []byte(`{"model_type": "opt", "v": 2}`)
	c2 := s.Add("model", "org/tiny", "v2", files)
	c := newClient(t, s)
	repoDir := filepath.Join(c.Cache, "models--org--tiny")
	dir, err := c.Model(context.Background(), "org/tiny", "v2")
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(repoDir, "snapshots", c2) {
		t.Errorf("v2 -> %s, want snapshot %s", dir, c2)
	}
	if b, _ := os.ReadFile(filepath.Join(repoDir, "refs", "v2")); string(b) != c2 {
		t.Errorf("refs/v2 = %q, want %s", b, c2)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "config.json")); !strings.Contains(string(b), `"v": 2`) {
		t.Errorf("v2 config %s", b)
	}
	dir1, err := c.Model(context.Background(), "org/tiny", c1)
	if err != nil || dir1 != filepath.Join(repoDir, "snapshots", c1) {
		t.Fatalf("commit %s -> %s, %v", c1, dir1, err)
	}
	ents, _ := os.ReadDir(filepath.Join(repoDir, "refs"))
	if len(ents) != 1 || ents[0].Name() != "v2" {
		t.Errorf("refs holds %v, want only v2 (a commit hash needs no ref)", ents)
	}
	// Blobs are shared by content: 5 distinct ones per snapshot (the two
	// "{}" files are one), plus the changed config.
	if blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs")); len(blobs) != 6 {
		t.Errorf("%d blobs, want 6", len(blobs))
	}
	s.Close()
	off := &Client{Cache: c.Cache, Offline: true}
	for rev, want := range map[string]string{"v2": c2, c1: c1} {
		if got, err := off.Model(context.Background(), "org/tiny", rev); err != nil || filepath.Base(got) != want {
			t.Errorf("offline %s -> %s, %v", rev, got, err)
		}
	}
	if _, err := off.Model(context.Background(), "org/tiny", "main"); !errors.Is(err, ErrOffline) {
		t.Errorf("offline main (never fetched): %v", err)
	}
}

// TestGated: without a token a gated repository is a clear error naming it
// and HF_TOKEN; with one, the token goes to the Hub but not to the CDN.
func TestGated(t *testing.T) {
	s := hubtest.New(t)
	s.Token = "hf_secret"
	s.Add("model", "meta/gated", "main", tinyRepo())
	s.Gate("model", "meta/gated")
	c := newClient(t, s)
	_, err := c.Model(context.Background(), "meta/gated", "")
	if !errors.Is(err, ErrAccess) {
		t.Fatalf("no token: %v, want ErrAccess", err)
	}
	for _, want := range []string{"meta/gated", "gated or private", "HF_TOKEN", "huggingface-cli login", s.URL + "/meta/gated"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	wrong := newClient(t, s)
	wrong.Token = "hf_other"
	if _, err := wrong.Model(context.Background(), "meta/gated", ""); !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "refused the token") {
		t.Errorf("wrong token: %v", err)
	}

	s.Reset()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "token"), []byte("hf_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withToken := NewClient(env(map[string]string{"HF_HOME": home, "HF_ENDPOINT": s.URL + "/"}))
	withToken.RetryWait = -1
	if withToken.Token != "hf_secret" || withToken.Cache != filepath.Join(home, "hub") || withToken.Endpoint != s.URL {
		t.Fatalf("NewClient: %+v", withToken)
	}
	if _, err := withToken.Model(context.Background(), "meta/gated", ""); err != nil {
		t.Fatal(err)
	}
	cdn := 0
	for _, r := range s.Requests() {
		auth := r.Header.Get("Authorization")
		switch {
		case r.Server == "hub" && auth != "Bearer hf_secret":
			t.Errorf("hub %s %s without the token (%q)", r.Method, r.Path, auth)
		case r.Server == "cdn" && auth != "":
			t.Errorf("the token leaked to the CDN: %s %s", r.Method, r.Path)
		case r.Server == "cdn":
			cdn++
		}
	}
	if cdn == 0 {
		t.Error("no request reached the CDN")
	}
}

// TestPrivateAndNotFound: the errors for a missing repository, revision or
// a private one say which.
func TestPrivateAndNotFound(t *testing.T) {
	s := hubtest.New(t)
	s.Token = "hf_secret"
	s.Add("model", "org/tiny", "main", tinyRepo())
	s.Add("model", "org/private", "main", tinyRepo())
	s.Private("model", "org/private")
	c := newClient(t, s)
	ctx := context.Background()
	_, err := c.Model(ctx, "org/private", "")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "or it is private") || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("private without a token: %v", err)
	}
	_, err = c.Model(ctx, "org/tiny", "nosuch")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `no revision "nosuch"`) || !strings.Contains(err.Error(), "--revision") {
		t.Errorf("missing revision: %v", err)
	}
	c.Token = "hf_secret"
	_, err = c.Model(ctx, "org/nothing", "")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "org/nothing (revision main): no such repository") ||
		!strings.Contains(err.Error(), "no local directory org/nothing") {
		t.Errorf("missing repository: %v", err)
	}
	if _, err := c.Model(ctx, "org/private", ""); err != nil {
		t.Errorf("private with the token: %v", err)
	}
	if _, err := c.Model(ctx, "not a name", ""); err == nil || !strings.Contains(err.Error(), "not a local directory") {
		t.Errorf("bad name: %v", err)
	}
	s.Add("model", "org/flax", "main", map[string][]byte{"config.json": []byte("{}"), "flax_model.msgpack": noise(10, 1)})
	if _, err := c.Model(ctx, "org/flax", ""); !errors.Is(err, ErrNoFiles) || !strings.Contains(err.Error(), "no weights") {
		t.Errorf("flax-only model: %v", err)
	}
}

// TestOffline: HF_HUB_OFFLINE makes no request; a repository the cache
// lacks (or holds in part) is an error saying what to do.
func TestOffline(t *testing.T) {
	s := hubtest.New(t)
	s.Add("model", "org/tiny", "main", tinyRepo())
	cache := t.TempDir()
	off := NewClient(env(map[string]string{"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": s.URL}))
	if !off.Offline {
		t.Fatal("HF_HUB_OFFLINE=1 not honoured")
	}
	_, err := off.Model(context.Background(), "org/tiny", "")
	want := "HF_HUB_OFFLINE=1 and org/tiny (revision main) is not in the cache at " + cache + "; run once online or unset HF_HUB_OFFLINE"
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), want) {
		t.Errorf("offline, not cached: %v\nwant %q", err, want)
	}
	if _, err := off.Model(context.Background(), "1.3b", ""); err == nil || !strings.Contains(err.Error(), "facebook/opt-1.3b (revision main) is not in the cache") {
		t.Errorf("offline short form: %v", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("offline client made %d requests", n)
	}
	tiny := Repo{Model, "org/tiny"}
	if _, err := (&Client{Cache: cache}).Cached(tiny, ""); !errors.Is(err, ErrNotCached) ||
		!strings.Contains(err.Error(), "org/tiny (revision main) is not in the Hugging Face cache at "+cache) {
		t.Errorf("Cached before the download: %v", err)
	}
	on := &Client{Cache: cache, Endpoint: s.URL}
	dir, err := on.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := (&Client{Cache: cache}).Cached(tiny, ""); err != nil || got != dir {
		t.Errorf("Cached after the download: %s, %v", got, err)
	}
	s.Reset()
	if got, err := off.Model(context.Background(), "org/tiny", ""); err != nil || got != dir {
		t.Errorf("offline, cached: %s, %v", got, err)
	}
	os.Remove(filepath.Join(dir, "model.safetensors"))
	if _, err := off.Model(context.Background(), "org/tiny", ""); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "incomplete in the cache") ||
		!strings.Contains(err.Error(), "(no weights)") {
		t.Errorf("offline, weights missing: %v", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("offline client made %d requests", n)
	}
	// Online, the missing file is fetched again into the same snapshot.
	if got, err := on.Model(context.Background(), "org/tiny", ""); err != nil || got != dir || !exists(filepath.Join(dir, "model.safetensors")) {
		t.Errorf("refetch: %s, %v", got, err)
	}
}

// TestDatasets: a dataset's Parquet files are fetched (not its JSON or
// scripts); JSON Lines when it has no Parquet; a script-only main branch
// falls back to refs/convert/parquet.
func TestDatasets(t *testing.T) {
	s := hubtest.New(t)
	s.Add("dataset", "Dahoas/rm-static", "main", map[string][]byte{
		"data/train-00000-of-00001-aaaa.parquet": noise(3000, 1),
		"data/test-00000-of-00001-bbbb.parquet":  noise(1000, 2),
		"extra/old.jsonl":                        []byte("{}\n"),
		"README.md":                              []byte("# rm-static"),
		".gitattributes":                         []byte(""),
	})
	s.Add("dataset", "stanfordnlp/SHP", "main", map[string][]byte{
		"askscience/train.json":      []byte("{}\n"),
		"askscience/validation.json": []byte("{}\n"),
		"shp.py":                     []byte("# script"),
	})
	s.Add("dataset", "openai/webgpt_comparisons", "main", map[string][]byte{"webgpt_comparisons.py": []byte("# script")})
	conv := s.Add("dataset", "openai/webgpt_comparisons", "refs/convert/parquet", map[string][]byte{
		"default/train/0000.parquet": noise(2000, 3),
	})
	c := newClient(t, s)
	ctx := context.Background()
	for id, want := range map[string][]string{
		"Dahoas/rm-static":          {"README.md", "data/test-00000-of-00001-bbbb.parquet", "data/train-00000-of-00001-aaaa.parquet"},
		"stanfordnlp/SHP":           {"askscience/train.json", "askscience/validation.json"},
		"openai/webgpt_comparisons": {"default/train/0000.parquet"},
	} {
		dir, err := c.Dataset(ctx, id, "")
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !strings.HasPrefix(dir, filepath.Join(c.Cache, "datasets--"+strings.ReplaceAll(id, "/", "--"), "snapshots")) {
			t.Errorf("%s: snapshot %s", id, dir)
		}
		if got := fetched(t, dir); !slices.Equal(got, want) {
			t.Errorf("%s: fetched %v, want %v", id, got, want)
		}
	}
	ref := filepath.Join(c.Cache, "datasets--openai--webgpt_comparisons", "refs", "refs", "convert", "parquet")
	if b, err := os.ReadFile(ref); err != nil || string(b) != conv {
		t.Errorf("converted ref %q, %v", b, err)
	}
	if _, err := c.Dataset(ctx, "openai/webgpt_comparisons", "main"); !errors.Is(err, ErrNoFiles) {
		t.Errorf("explicit main of a script dataset: %v", err)
	}
	s.Close()
	off := &Client{Cache: c.Cache, Offline: true}
	if dir, err := off.Dataset(ctx, "openai/webgpt_comparisons", ""); err != nil || filepath.Base(dir) != conv {
		t.Errorf("offline converted dataset: %s, %v", dir, err)
	}
}

// TestSharded fetches a sharded safetensors set through its index.
func TestSharded(t *testing.T) {
	s := hubtest.New(t)
	s.Add("model", "org/big", "main", map[string][]byte{
		"config.json":    []byte("{}"),
		"tokenizer.json": []byte("{}"),
		"model.safetensors.index.json": []byte(`{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
			"b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}`),
		"model-00001-of-00002.safetensors": noise(100, 1),
		"model-00002-of-00002.safetensors": noise(100, 2),
		"pytorch_model.bin.index.json":     []byte(`{"weight_map": {"a": "pytorch_model-1.bin"}}`),
		"pytorch_model-1.bin":              noise(100, 3),
	})
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/big", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json"}
	if got := fetched(t, dir); !slices.Equal(got, want) {
		t.Errorf("fetched %v, want %v", got, want)
	}
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if m := missing(Model, filepath.Join(c.Cache, "models--org--big"), filepath.Base(dir), dir); m != "weights" {
		t.Errorf("a missing shard: missing = %q", m)
	}
}

// TestRenamed follows the Hub's relative redirect for a renamed repository.
func TestRenamed(t *testing.T) {
	s := hubtest.New(t)
	s.Add("model", "org/new-name", "main", tinyRepo())
	s.Rename("model", "org/old-name", "org/new-name")
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/old-name", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dir, "models--org--old-name") || !exists(filepath.Join(dir, "model.safetensors")) {
		t.Errorf("renamed repository stored at %s", dir)
	}
}

// TestConcurrent: two clients fetching one repository into one cache
// download each blob once (the lock), and both get the snapshot.
func TestConcurrent(t *testing.T) {
	s := hubtest.New(t)
	s.Add("model", "org/tiny", "main", tinyRepo())
	cache := t.TempDir()
	var wg sync.WaitGroup
	dirs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			dirs[i], errs[i] = (&Client{Cache: cache, Endpoint: s.URL, RetryWait: -1}).Model(context.Background(), "org/tiny", "")
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || dirs[0] != dirs[1] {
		t.Fatalf("%v %v %v", dirs, errs[0], errs[1])
	}
	if got := fetched(t, dirs[0]); len(got) != 6 {
		t.Errorf("snapshot holds %v", got)
	}
	gets := 0
	for _, r := range s.Requests() {
		if r.Server == "cdn" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("the LFS file was downloaded %d times, want once", gets)
	}
}

// TestLocalDirectoryWins: an existing directory is used as it is, even
// when it looks like a Hub id or a short form.
func TestLocalDirectoryWins(t *testing.T) {
	s := hubtest.New(t)
	c := newClient(t, s)
	wd := t.TempDir()
	t.Chdir(wd)
	for _, name := range []string{"1.3b", "org/tiny", wd} {
		if err := os.MkdirAll(name, 0o755); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Model(context.Background(), name, "v9"); err != nil || got != name {
			t.Errorf("%s -> %s, %v", name, got, err)
		}
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests for local directories", n)
	}
}

func TestNetworkError(t *testing.T) {
	s := hubtest.New(t)
	c := newClient(t, s)
	s.Close()
	_, err := c.Model(context.Background(), "org/tiny", "")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Hub at "+s.URL) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE=1") {
		t.Errorf("unreachable Hub: %v", err)
	}
}
