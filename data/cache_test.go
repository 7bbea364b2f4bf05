package data

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// cachedOptions are sampleOptions with a cache folder and tokenizer id.
func cachedOptions(tok Tokenizer, dir string) Options {
	o := sampleOptions(tok)
	o.CacheDir, o.TokenizerID = dir, "byteTok-v1"
	return o
}

func sameExamples(t *testing.T, what string, got, want *Set) {
	t.Helper()
	if len(got.Examples) != len(want.Examples) {
		t.Fatalf("%s: %d examples, want %d", what, len(got.Examples), len(want.Examples))
	}
	for i := range got.Examples {
		g, w := got.Examples[i], want.Examples[i]
		if len(g.Rejected) == 0 && len(w.Rejected) == 0 {
			g.Rejected, w.Rejected = nil, nil
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: example %d differs:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
	gs, ws := append([]Stats(nil), got.Stats...), append([]Stats(nil), want.Stats...)
	for i := range gs {
		gs[i].Cached = false
	}
	for i := range ws {
		ws[i].Cached = false
	}
	if !reflect.DeepEqual(gs, ws) {
		t.Errorf("%s: stats %+v, want %+v", what, gs, ws)
	}
	if got.Phase != want.Phase {
		t.Errorf("%s: phase %v, want %v", what, got.Phase, want.Phase)
	}
}

func arrowFiles(t *testing.T, dir string) []string {
	var out []string
	for _, n := range listDir(t, dir) {
		if strings.HasPrefix(n, ".") {
			t.Errorf("temporary file %s left in the cache", n)
		}
		if strings.HasSuffix(n, ".arrow") {
			out = append(out, n)
		}
	}
	return out
}

// TestCacheReused: the second run reads the Arrow cache and never calls the
// tokenizer; its examples equal the first run's, for every phase.
func TestCacheReused(t *testing.T) {
	dir := t.TempDir()
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	for i, p := range []Phase{PhaseSFT, PhaseReward, PhasePPO} {
		first := &batchTok{}
		a, err := Build(ds, Train, p, cachedOptions(first, dir))
		if err != nil {
			t.Fatal(err)
		}
		if first.calls.Load() == 0 || a.Stats[0].Cached {
			t.Fatalf("phase %d: first run did not tokenize", p)
		}
		if n := len(arrowFiles(t, dir)); n != i+1 {
			t.Fatalf("phase %d: %d cache files, want %d", p, n, i+1)
		}
		second := &batchTok{}
		b, err := Build(ds, Train, p, cachedOptions(second, dir))
		if err != nil {
			t.Fatal(err)
		}
		if n := second.calls.Load(); n != 0 {
			t.Errorf("phase %d: second run called the tokenizer %d times", p, n)
		}
		if !b.Stats[0].Cached {
			t.Errorf("phase %d: second run not marked cached", p)
		}
		sameExamples(t, p.String(), b, a)
	}
}

// TestCacheKey: anything the examples depend on changes the key.
func TestCacheKey(t *testing.T) {
	dir := t.TempDir()
	src := sampleFile(t, "sample.jsonl")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f := writeFile(t, dir, "data/train.jsonl", string(b))
	ds := fileDataset(rmStatic(t), []string{f})
	cache := filepath.Join(dir, "cache")
	base := cachedOptions(&byteTok{}, cache)
	if _, err := Build(ds, Train, PhaseSFT, base); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(o *Options)
		hit    bool
	}{
		{"same", func(o *Options) {}, true},
		{"PAD only matters when padding", func(o *Options) { o.PAD = 7 }, true},
		{"max prompt len is not used by phase 1", func(o *Options) { o.MaxPromptLen = 9 }, true},
		{"seed", func(o *Options) { o.Seed = 1 }, false},
		{"split", func(o *Options) { o.Split = Split{3, 4, 4} }, false},
		{"max seq len", func(o *Options) { o.MaxSeqLen = 81 }, false},
		{"add eos", func(o *Options) { o.AddEOS = false }, false},
		{"tokenizer", func(o *Options) { o.TokenizerID = "other" }, false},
		{"skip malformed", func(o *Options) { o.SkipMalformed = true }, false},
	} {
		tok := &byteTok{}
		o := base
		o.Tokenizer = tok
		c.change(&o)
		if _, err := Build(ds, Train, PhaseSFT, o); err != nil {
			t.Fatal(err)
		}
		if hit := tok.calls.Load() == 0; hit != c.hit {
			t.Errorf("%s: cache hit %v, want %v", c.name, hit, c.hit)
		}
	}
	// The key is the files' content: touching a file (a new modification
	// time, the same bytes) keeps its entries, and an edit of the same size
	// with the old modification time restored invalidates them.
	st, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	later := st.ModTime().Add(time.Hour)
	if err := os.Chtimes(f, later, later); err != nil {
		t.Fatal(err)
	}
	tok := &byteTok{}
	o := base
	o.Tokenizer = tok
	if _, err := Build(ds, Train, PhaseSFT, o); err != nil || tok.calls.Load() != 0 {
		t.Errorf("touched file: err %v, tokenizer calls %d, want a cache hit", err, tok.calls.Load())
	}
	edited := strings.ReplaceAll(string(b), "Human:", "HUMAN:")
	if edited == string(b) {
		t.Fatal("no \"Human:\" in the sample")
	}
	if err := os.WriteFile(f, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, later, later); err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(f); err != nil || st2.Size() != st.Size() || !st2.ModTime().Equal(later) {
		t.Fatalf("edited file: %v, size %d (want %d), mtime restored %v", err, st2.Size(), st.Size(), st2.ModTime().Equal(later))
	}
	tok = &byteTok{}
	o.Tokenizer = tok
	set, err := Build(ds, Train, PhaseSFT, o)
	if err != nil || tok.calls.Load() == 0 || set.Stats[0].Cached {
		t.Fatalf("edited file (same size and mtime): err %v, tokenizer calls %d, want a re-tokenization", err, tok.calls.Load())
	}
	if !containsIDs(set, (&byteTok{}).Encode("HUMAN:")[1:]) {
		t.Errorf("edited file: the examples do not hold the edited text")
	}
	// No tokenizer id or no folder: no cache.
	for _, o := range []Options{
		func() Options { o := base; o.TokenizerID = ""; return o }(),
		func() Options { o := base; o.CacheDir = ""; return o }(),
	} {
		tok := &byteTok{}
		o.Tokenizer = tok
		if _, err := Build(ds, Train, PhaseSFT, o); err != nil || tok.calls.Load() == 0 {
			t.Errorf("cache used without id/folder: %v", err)
		}
	}
}

// containsIDs reports whether an example of set holds sub.
func containsIDs(set *Set, sub []int32) bool {
	for _, ex := range set.Examples {
		for i := 0; i+len(sub) <= len(ex.IDs); i++ {
			if slices.Equal(ex.IDs[i:i+len(sub)], sub) {
				return true
			}
		}
	}
	return false
}

// TestCacheCorrupt: an unreadable cache file is a miss and is replaced.
func TestCacheCorrupt(t *testing.T) {
	dir := t.TempDir()
	ds := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")})
	want, err := Build(ds, Train, PhaseReward, cachedOptions(&byteTok{}, dir))
	if err != nil {
		t.Fatal(err)
	}
	files := arrowFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	p := filepath.Join(dir, files[0])
	full, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{[]byte("not arrow"), full[:len(full)/2], nil} {
		if err := os.WriteFile(p, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		tok := &byteTok{}
		got, err := Build(ds, Train, PhaseReward, cachedOptions(tok, dir))
		if err != nil {
			t.Fatal(err)
		}
		if tok.calls.Load() == 0 {
			t.Error("a corrupt cache file was used")
		}
		sameExamples(t, "rebuilt", got, want)
	}
}

func TestLoadUsesCache(t *testing.T) {
	dir := t.TempDir()
	a := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.parquet")}, sampleFile(t, "sample.jsonl"))
	b := fileDataset(rmStatic(t), []string{sampleFile(t, "sample.jsonl")})
	tr1, ev1, err := Load([]*Dataset{a, b}, nil, PhaseSFT, cachedOptions(&byteTok{}, dir))
	if err != nil {
		t.Fatal(err)
	}
	tok := &byteTok{}
	tr2, ev2, err := Load([]*Dataset{a, b}, nil, PhaseSFT, cachedOptions(tok, dir))
	if err != nil {
		t.Fatal(err)
	}
	if tok.calls.Load() != 0 {
		t.Errorf("second Load tokenized %d texts", tok.calls.Load())
	}
	sameExamples(t, "train", tr2, tr1)
	sameExamples(t, "eval", ev2, ev1)
	if len(ev1.Examples) != 4 {
		t.Errorf("eval has %d examples, want 4 (phase 1 slice of the 24 eval rows)", len(ev1.Examples))
	}
}

func TestDefaultCacheDir(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GOCHAT_CACHE": "/g", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/g/data"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/gochat/data"},
		{map[string]string{"HOME": "/h"}, "/h/.cache/gochat/data"},
	} {
		if got := DefaultCacheDir(env(c.env)); got != c.want {
			t.Errorf("DefaultCacheDir(%v) = %s, want %s", c.env, got, c.want)
		}
	}
}

func TestHashFiles(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "vocab.json", "{}")
	b := writeFile(t, dir, "merges.txt", "#version: 0.2\n")
	h1, err := HashFiles(a, b, filepath.Join(dir, "missing.json"))
	if err != nil || len(h1) != 64 {
		t.Fatalf("HashFiles = %q, %v", h1, err)
	}
	writeFile(t, dir, "merges.txt", "#version: 0.2\na b\n")
	if h2, _ := HashFiles(a, b); h2 == h1 {
		t.Error("hash unchanged after a file changed")
	}
	if _, err := HashFiles(filepath.Join(dir, "none")); err == nil {
		t.Error("HashFiles of no existing file succeeded")
	}
}
