package data

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gochat-ai/gochat/hub"
)

// Dataset is a resolved dataset: the adapter that reads it and its data files
// per raw split.
type Dataset struct {
	// Name is the dataset as given (a registry name or a path).
	Name string
	// Root is the directory the files were found under ("" for one file).
	Root    string
	Adapter *Adapter
	// Splits maps a raw split name ("train", "test", "validation", ...) to its
	// files, in read order.
	Splits map[string][]string
	// Ignored lists data files under Root whose names carry no split while
	// others do.
	Ignored []string
}

// evalSplits returns the split names that can serve as evaluation data, in
// order of preference after the adapter's own EvalSplit.
func evalSplits() []string { return []string{"test", "validation", "valid", "eval", "dev"} }

// knownSplits returns the split names recognised in file and folder names
// ("validation" before its prefix "valid").
func knownSplits() []string { return []string{"train", "test", "validation", "valid", "eval", "dev"} }

// Part selects the training or the evaluation data of a dataset.
type Part int

// Parts.
const (
	Train Part = iota
	Eval
)

func (p Part) String() string {
	if p == Eval {
		return "eval"
	}
	return "train"
}

// PartFiles returns the raw split that serves part and its files. For an
// adapter with EvalFromTrain both parts read the train split. ok is false
// when the dataset has no such split.
func (d *Dataset) PartFiles(p Part) (split string, files []string, ok bool) {
	a := d.Adapter
	if p == Train || a.EvalFromTrain {
		files, ok = d.Splits[a.TrainSplit]
		return a.TrainSplit, files, ok
	}
	if files, ok := d.Splits[a.EvalSplit]; ok {
		return a.EvalSplit, files, true
	}
	if a.Name == "generic" || a.Name == "text" {
		for _, s := range evalSplits() {
			if files, ok := d.Splits[s]; ok {
				return s, files, true
			}
		}
	}
	return a.EvalSplit, nil, false
}

// ResolveOptions control how a dataset name or path is resolved.
type ResolveOptions struct {
	// Adapter forces a registered adapter by name; "" picks one by matching
	// the name or path (as DeepSpeed-Chat does), else the generic mapping.
	Adapter string
	// Columns is the generic column mapping; empty names default to
	// "prompt", "chosen" and "rejected".
	Columns ColumnMap
	// Revision is the Hub revision (branch, tag or commit) of a dataset
	// named by Hub id; "" means main (or the Hub's Parquet conversion when
	// main has no data files).
	Revision string
	// Hub fetches a dataset named by Hub id into the Hugging Face cache
	// when the cache lacks it (a *hub.Client); nil means the cache only.
	Hub HubClient
	// HubCache is the Hugging Face hub cache directory searched when Hub
	// is nil; "" derives it from the environment (hub.CacheDir).
	HubCache string
	// Getenv reads environment variables; nil means os.Getenv.
	Getenv func(string) string
}

// HubClient finds a dataset repository's snapshot directory in the Hugging
// Face cache, downloading it when absent (hub.Client does).
type HubClient interface {
	Dataset(ctx context.Context, id, revision string) (dir string, err error)
}

// Resolve finds a dataset by registry name or path. A path may be a data
// file (.parquet, .json, .jsonl) or a directory searched recursively; split
// names come from file or folder names ("data/train-00000-of-00001.parquet",
// "test.jsonl"), and files with no split name are the train split when no
// file has one. A name that is not a local path is a Hub id (ORG/NAME): its
// snapshot at Revision comes from Hub (the Hugging Face cache, downloading
// its Parquet or JSON files when absent), or from the cache alone when Hub
// is nil. local/jsonfile reads data/train.json and data/eval.json under the
// current directory, or under the given directory with Adapter
// "local/jsonfile".
func Resolve(nameOrPath string, o ResolveOptions) (*Dataset, error) {
	a, err := pickAdapter(nameOrPath, o)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Name: nameOrPath, Adapter: a, Splits: map[string][]string{}}
	if a.Files != nil {
		root := "."
		if st, err := os.Stat(nameOrPath); err == nil && st.IsDir() {
			root = nameOrPath
		}
		d.Root = root
		for split, rel := range a.Files {
			p := filepath.Join(root, rel)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("dataset %s: %w", nameOrPath, err)
			}
			d.Splits[split] = []string{p}
		}
		return d, nil
	}
	if st, err := os.Stat(nameOrPath); err == nil {
		if !st.IsDir() {
			if _, ok := formatOf(nameOrPath); !ok {
				return nil, fmt.Errorf("dataset %s: not a data file (want .parquet, .json, .jsonl)", nameOrPath)
			}
			split := splitOfPath(filepath.Base(nameOrPath))
			if split == "" {
				split = "train"
			}
			d.Splits[split] = []string{nameOrPath}
			return d, nil
		}
		d.Root = nameOrPath
		return d, d.discover()
	}
	org, name, ok := strings.Cut(nameOrPath, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("dataset %s: no such file or directory, and not an ORG/NAME dataset name (registered: %s)", nameOrPath, strings.Join(Names(), ", "))
	}
	snap, err := o.snapshot(nameOrPath)
	if err != nil {
		return nil, err
	}
	d.Root = snap
	return d, d.discover()
}

// snapshot finds the snapshot of the dataset repository id.
func (o ResolveOptions) snapshot(id string) (string, error) {
	if o.Hub != nil {
		return o.Hub.Dataset(context.Background(), id, o.Revision)
	}
	cache := o.HubCache
	if cache == "" {
		cache = hub.CacheDir(o.Getenv)
	}
	dir, err := (&hub.Client{Cache: cache}).Cached(hub.Repo{Type: hub.Dataset, ID: id}, o.Revision)
	if err != nil {
		return "", fmt.Errorf("dataset %s: not a local path, and %w", id, err)
	}
	return dir, nil
}

func pickAdapter(nameOrPath string, o ResolveOptions) (*Adapter, error) {
	if o.Adapter != "" {
		a, ok := Lookup(o.Adapter)
		if !ok {
			return nil, fmt.Errorf("unknown dataset adapter %q (registered: %s)", o.Adapter, strings.Join(Names(), ", "))
		}
		return a, nil
	}
	if a, ok := match(nameOrPath); ok {
		return a, nil
	}
	m := o.Columns
	if m.Prompt == "" {
		m.Prompt = "prompt"
	}
	if m.Chosen == "" {
		m.Chosen = "chosen"
	}
	if m.Rejected == "" {
		m.Rejected = "rejected"
	}
	return Generic(m)
}

// isMetaFile reports JSON files in dataset folders that hold metadata, not
// rows.
func isMetaFile(name string) bool {
	switch name {
	case "dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json":
		return true
	}
	return false
}

// discover collects the data files under d.Root by split.
func (d *Dataset) discover() error {
	var unsplit []string
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != d.Root && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() || isMetaFile(e.Name()) {
			return nil
		}
		if _, ok := formatOf(p); !ok {
			return nil
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() { // hub snapshots hold symlinks
			return nil
		}
		rel, _ := filepath.Rel(d.Root, p)
		if split := splitOfPath(rel); split != "" {
			d.Splits[split] = append(d.Splits[split], p)
		} else {
			unsplit = append(unsplit, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dataset %s: %w", d.Name, err)
	}
	if len(d.Splits) == 0 {
		if len(unsplit) == 0 {
			return fmt.Errorf("dataset %s: no .parquet, .json or .jsonl files under %s", d.Name, d.Root)
		}
		d.Splits["train"] = unsplit
	} else {
		d.Ignored = unsplit
	}
	for _, files := range d.Splits {
		sort.Strings(files)
	}
	return nil
}

// splitOfPath returns the split a relative file path names in one of its
// folder names or its file name ("data/train-00000-of-00001.parquet" ->
// "train", "validation/x.json" -> "validation"), or "".
func splitOfPath(rel string) string {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		part = strings.ToLower(part)
		for _, s := range knownSplits() {
			if !strings.HasPrefix(part, s) {
				continue
			}
			rest := part[len(s):]
			if rest == "" || strings.ContainsRune("-._ 0123456789", rune(rest[0])) {
				return s
			}
		}
	}
	return ""
}
