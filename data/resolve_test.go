package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	hubpkg "github.com/gochat-ai/gochat/hub"
	"github.com/gochat-ai/gochat/hub/hubtest"
)

const oneRow = `{"prompt": "\n\nHuman: hi\n\nAssistant:", "chosen": " hello", "rejected": " no"}` + "\n"

func TestSplitOfPath(t *testing.T) {
	for in, want := range map[string]string{
		"data/train-00000-of-00001-2a1df75c6bce91ab.parquet": "train",
		"data/test-00000-of-00001.parquet":                   "test",
		"train.jsonl":                                        "train",
		"validation.json":                                    "validation",
		"valid.jsonl":                                        "valid",
		"askscience/validation.json":                         "validation",
		"train/0000.parquet":                                 "train",
		"eval.json":                                          "eval",
		"dev_set.jsonl":                                      "dev",
		"training_notes.json":                                "",
		"sample.parquet":                                     "",
		"contest.json":                                       "",
		"TRAIN.JSONL":                                        "train",
	} {
		if got := splitOfPath(in); got != want {
			t.Errorf("splitOfPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Commit hashes of hub cache snapshots.
var (
	commitA = strings.Repeat("a1", 20)
	commitB = strings.Repeat("b2", 20)
)

// TestResolveHubCache builds a hub cache layout (blobs + symlinked snapshot
// files, refs/main) and resolves a registry name from it.
func TestResolveHubCache(t *testing.T) {
	hub := t.TempDir()
	repo := filepath.Join(hub, "datasets--Dahoas--rm-static")
	blob := writeFile(t, repo, "blobs/0123abcd", oneRow)
	writeFile(t, repo, "blobs/4567", oneRow+oneRow)
	writeFile(t, repo, "refs/main", commitA+"\n")
	snap := filepath.Join(repo, "snapshots", commitA)
	if err := os.MkdirAll(filepath.Join(snap, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(blob, filepath.Join(snap, "data", "train-00000-of-00001.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, "blobs/4567"), filepath.Join(snap, "data", "test-00000-of-00001.jsonl")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, snap, "README.md", "# card")
	writeFile(t, snap, "dataset_infos.json", `{"default": {}}`)
	writeFile(t, repo, "snapshots/"+commitB+"/data/train.jsonl", oneRow) // not the refs/main revision

	{
		getenv := func(k string) string {
			if k == "HF_HUB_CACHE" {
				return hub
			}
			return ""
		}
		ds, err := Resolve("Dahoas/rm-static", ResolveOptions{Getenv: getenv})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Adapter.Name != "Dahoas/rm-static" || ds.Root != snap {
			t.Errorf("adapter %s root %s", ds.Adapter.Name, ds.Root)
		}
		want := map[string][]string{
			"train": {filepath.Join(snap, "data", "train-00000-of-00001.jsonl")},
			"test":  {filepath.Join(snap, "data", "test-00000-of-00001.jsonl")},
		}
		if !reflect.DeepEqual(ds.Splits, want) {
			t.Errorf("splits %v", ds.Splits)
		}
		if split, files, ok := ds.PartFiles(Eval); !ok || split != "test" || len(files) != 1 {
			t.Errorf("eval part %s %v %v", split, files, ok)
		}
		if n, err := partRows(ds.Splits["test"]); n != 2 || err != nil {
			t.Errorf("test rows %d %v", n, err)
		}
	}
	// A commit hash names its snapshot directly.
	ds, err := Resolve("Dahoas/rm-static", ResolveOptions{HubCache: hub, Revision: commitB})
	if err != nil || ds.Root != filepath.Join(repo, "snapshots", commitB) {
		t.Errorf("revision %s: %v %v", commitB, ds, err)
	}
	// HF_HOME/hub is searched.
	home := t.TempDir()
	repo2 := filepath.Join(home, "hub", "datasets--stanfordnlp--SHP")
	writeFile(t, repo2, "refs/main", commitA)
	writeFile(t, repo2, "snapshots/"+commitA+"/askscience/train.json", oneRow)
	writeFile(t, repo2, "snapshots/"+commitA+"/askscience/validation.json", oneRow)
	ds, err = Resolve("stanfordnlp/SHP", ResolveOptions{Getenv: func(k string) string {
		if k == "HF_HOME" {
			return home
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Adapter.Name != "stanfordnlp/SHP" || len(ds.Splits["train"]) != 1 || len(ds.Splits["validation"]) != 1 {
		t.Errorf("SHP: %s %v", ds.Adapter.Name, ds.Splits)
	}
	if _, err := Resolve("Nobody/nothing", ResolveOptions{HubCache: hub}); !errors.Is(err, hubpkg.ErrNotCached) || !strings.Contains(err.Error(), "not in the Hugging Face cache at "+hub) {
		t.Errorf("missing dataset: %v", err)
	}
	if _, err := Resolve("no-such-thing", ResolveOptions{HubCache: hub}); err == nil || !strings.Contains(err.Error(), "registered") {
		t.Errorf("bad name: %v", err)
	}
}

// TestResolveHubDownload fetches a registry dataset from a fake Hub into
// the cache: its data files, not its other files, then reads it offline.
func TestResolveHubDownload(t *testing.T) {
	s := hubtest.New(t)
	rows := oneRow + oneRow
	commit := s.Add("dataset", "Dahoas/rm-static", "main", map[string][]byte{
		"data/train-00000-of-00001.jsonl": []byte(rows),
		"data/test-00000-of-00001.jsonl":  []byte(oneRow),
		"rm_static.py":                    []byte("# script"),
	})
	cache := t.TempDir()
	c := &hubpkg.Client{Cache: cache, Endpoint: s.URL}
	ds, err := Resolve("Dahoas/rm-static", ResolveOptions{Hub: c})
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(cache, "datasets--Dahoas--rm-static", "snapshots", commit)
	if ds.Adapter.Name != "Dahoas/rm-static" || ds.Root != snap || len(ds.Splits["train"]) != 1 || len(ds.Splits["test"]) != 1 {
		t.Fatalf("resolved %s at %s: %v", ds.Adapter.Name, ds.Root, ds.Splits)
	}
	if n, err := partRows(ds.Splits["train"]); n != 2 || err != nil {
		t.Errorf("train rows %d %v", n, err)
	}
	s.Close()
	for _, o := range []ResolveOptions{{HubCache: cache}, {Hub: &hubpkg.Client{Cache: cache, Offline: true}}} {
		if ds, err := Resolve("Dahoas/rm-static", o); err != nil || ds.Root != snap {
			t.Errorf("from the cache: %v", err)
		}
	}
	off := &hubpkg.Client{Cache: cache, Offline: true}
	if _, err := Resolve("Dahoas/full-hh-rlhf", ResolveOptions{Hub: off}); !errors.Is(err, hubpkg.ErrOffline) {
		t.Errorf("offline, not cached: %v", err)
	}
	if _, err := off.Dataset(context.Background(), "Dahoas/rm-static", "v9"); !errors.Is(err, hubpkg.ErrOffline) {
		t.Errorf("offline, revision not cached: %v", err)
	}
}

func TestResolvePaths(t *testing.T) {
	dir := t.TempDir()
	// One file: split from its name, else train; generic mapping by default.
	f := writeFile(t, dir, "single/mydata.jsonl", oneRow)
	ds, err := Resolve(f, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Adapter.Name != "generic" || !reflect.DeepEqual(ds.Splits, map[string][]string{"train": {f}}) {
		t.Errorf("single file: %s %v", ds.Adapter.Name, ds.Splits)
	}
	// A column mapping.
	ds, err = Resolve(f, ResolveOptions{Columns: ColumnMap{Prompt: "question", Chosen: "good", Rejected: "bad"}})
	if err != nil || ds.Adapter.Columns[0].Name != "question" || ds.Adapter.Columns[2].Name != "bad" {
		t.Errorf("mapping: %v %+v", err, ds.Adapter.Columns)
	}
	// Forcing an adapter on a path.
	ds, err = Resolve(f, ResolveOptions{Adapter: "Dahoas/rm-static"})
	if err != nil || ds.Adapter.Name != "Dahoas/rm-static" {
		t.Errorf("forced adapter: %v", err)
	}
	if _, err := Resolve(f, ResolveOptions{Adapter: "x/y"}); err == nil {
		t.Error("unknown adapter accepted")
	}
	// A folder: unsplit files are ignored once some file names a split.
	d := filepath.Join(dir, "folder")
	tr := writeFile(t, d, "train.jsonl", oneRow)
	va := writeFile(t, d, "validation.json", "["+strings.TrimSpace(oneRow)+"]")
	other := writeFile(t, d, "extra.parquet", "")
	writeFile(t, d, ".hidden/train.jsonl", oneRow)
	writeFile(t, d, "notes.txt", "x")
	ds, err = Resolve(d, ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ds.Splits, map[string][]string{"train": {tr}, "validation": {va}}) || !reflect.DeepEqual(ds.Ignored, []string{other}) {
		t.Errorf("folder: %v ignored %v", ds.Splits, ds.Ignored)
	}
	if split, _, ok := ds.PartFiles(Eval); !ok || split != "validation" {
		t.Errorf("generic eval split %q %v", split, ok)
	}
	// A folder of unsplit files is all train.
	u := filepath.Join(dir, "unsplit")
	a := writeFile(t, u, "b.jsonl", oneRow)
	b := writeFile(t, u, "a/part.jsonl", oneRow)
	ds, err = Resolve(u, ResolveOptions{})
	if err != nil || !reflect.DeepEqual(ds.Splits, map[string][]string{"train": {b, a}}) {
		t.Errorf("unsplit folder: %v %v", ds.Splits, err)
	}
	// Errors.
	if _, err := Resolve(writeFile(t, dir, "x.csv", "a"), ResolveOptions{}); err == nil {
		t.Error("a .csv file resolved")
	}
	if _, err := Resolve(filepath.Join(dir, "empty-dir"), ResolveOptions{}); err == nil {
		t.Error("a missing path resolved")
	}
	os.MkdirAll(filepath.Join(dir, "nodata"), 0o755)
	if _, err := Resolve(filepath.Join(dir, "nodata"), ResolveOptions{}); err == nil || !strings.Contains(err.Error(), "no .parquet") {
		t.Errorf("a folder without data: %v", err)
	}
	// A path naming a registry dataset picks its adapter (DeepSpeed-Chat's
	// substring rule).
	p := writeFile(t, dir, "Dahoas/rm-static/data/train-0.jsonl", oneRow)
	ds, err = Resolve(filepath.Join(dir, "Dahoas", "rm-static"), ResolveOptions{})
	if err != nil || ds.Adapter.Name != "Dahoas/rm-static" || ds.Splits["train"][0] != p {
		t.Errorf("path with a registry name: %v %+v", err, ds)
	}
}

func TestResolveLocalJSONFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "data/train.json", `[{"prompt": "Human: q Assistant:", "chosen": "a", "rejected": "b"}]`)
	writeFile(t, dir, "data/eval.json", `[{"prompt": "Human: q2 Assistant:", "chosen": "c", "rejected": null}]`)
	t.Chdir(dir)
	ds, err := Resolve("local/jsonfile", ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Adapter.Name != "local/jsonfile" || len(ds.Splits["train"]) != 1 || len(ds.Splits["eval"]) != 1 {
		t.Fatalf("%s %v", ds.Adapter.Name, ds.Splits)
	}
	o := sampleOptions(&byteTok{})
	o.Split = Split{1, 0, 0}
	train, eval, err := Load([]*Dataset{ds}, nil, PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(train.Examples[0].IDs, cat(enc(" Human: q Assistant: a"), []int32{tEOS})) || len(eval.Examples) != 1 {
		t.Errorf("train %v, eval %d", train.Examples[0].IDs, len(eval.Examples))
	}
	// Phase 2 drops the eval row with a null rejected as empty.
	o.Split = Split{0, 1, 0}
	_, eval, err = Load([]*Dataset{ds}, nil, PhaseReward, o)
	if err != nil || len(eval.Examples) != 0 || eval.Stats[0].Empty != 1 {
		t.Errorf("phase 2 eval: %v %+v", err, eval.Stats)
	}
	// The same folder given as a path with the adapter forced.
	t.Chdir(os.TempDir())
	if ds, err := Resolve(dir, ResolveOptions{Adapter: "local/jsonfile"}); err != nil || ds.Root != dir {
		t.Errorf("local/jsonfile from a path: %v", err)
	}
	if _, err := Resolve("local/jsonfile", ResolveOptions{}); err == nil {
		t.Error("local/jsonfile resolved without data/train.json")
	}
}

func TestSFTOnly(t *testing.T) {
	dir := t.TempDir()
	var rows strings.Builder
	for i := range 5 {
		rows.WriteString(`{"prompt": "P` + string(rune('a'+i)) + `", "chosen": " c", "rejected": " r"}` + "\n")
	}
	main := fileDataset(rmStatic(t), []string{writeFile(t, dir, "main.jsonl", rows.String())})
	extra := fileDataset(rmStatic(t), []string{writeFile(t, dir, "extra.jsonl", rows.String())})
	o := sampleOptions(&byteTok{})
	o.Split = Split{2, 4, 4} // 5 rows -> bounds [0 1 3 5]: phase 1 gets one row
	train, _, err := Load([]*Dataset{main}, []*Dataset{extra}, PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	// One row from main plus all five SFT-only rows (split 10,0,0), then
	// shuffled with Permutation(seed, 6).
	if len(train.Examples) != 6 || len(train.Stats) != 2 || train.Stats[1].Kept != 5 {
		t.Fatalf("%d examples, stats %+v", len(train.Examples), train.Stats)
	}
	perm := Permutation(o.Seed, 6)
	mainRow := int64(Permutation(o.Seed, 5)[0])
	unshuffled := []int64{mainRow}
	extraRows := Permutation(o.Seed, 5)
	for _, r := range extraRows {
		unshuffled = append(unshuffled, int64(r))
	}
	for i, ex := range train.Examples {
		if ex.Row != unshuffled[perm[i]] || (ex.Dataset == 0) != (perm[i] == 0) {
			t.Errorf("example %d: row %d dataset %d, want row %d", i, ex.Row, ex.Dataset, unshuffled[perm[i]])
		}
	}
	// SFT-only datasets are ignored in other phases.
	train, _, err = Load([]*Dataset{main}, []*Dataset{extra}, PhasePPO, o)
	if err != nil || len(train.Stats) != 1 {
		t.Errorf("phase 3 with SFT-only data: %v %+v", err, train.Stats)
	}
	if _, _, err := Load(nil, nil, PhaseSFT, o); err == nil {
		t.Error("Load of no datasets succeeded")
	}
}

func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "train.jsonl", oneRow)
	noRej, _ := Generic(ColumnMap{Prompt: "prompt", Chosen: "chosen"})
	ds := &Dataset{Name: "x", Adapter: noRej, Splits: map[string][]string{"train": {f}}}
	o := sampleOptions(&byteTok{})
	if _, err := Build(ds, Train, PhaseReward, o); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Errorf("phase 2 without a rejected column: %v", err)
	}
	if _, err := Build(ds, Train, PhaseSFT, o); err != nil {
		t.Errorf("phase 1 without a rejected column: %v", err)
	}
	ds = &Dataset{Name: "x", Adapter: rmStatic(t), Splits: map[string][]string{"test": {f}}}
	if _, err := Build(ds, Train, PhaseSFT, o); err == nil || !strings.Contains(err.Error(), `no "train" split`) {
		t.Errorf("no train split: %v", err)
	}
}
