package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// modelExtras are the small files of a model repository that gochat (and
// transformers) read beside the weights: the configuration and the
// tokenizer. Each is fetched when the repository has it.
func modelExtras() []string {
	return []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"}
}

// weightLayouts are the weight files gochat reads, in the order
// tensor.OpenDir prefers them; an index names its shards.
func weightLayouts() []string {
	return []string{"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"}
}

// ErrNoFiles reports a repository without the files gochat reads: a model
// without config.json or weights in a format it loads, a dataset without
// Parquet, JSON or JSON Lines data.
var ErrNoFiles = errors.New("no files gochat reads")

// modelFiles picks the files of a model repository to fetch from its file
// list: the extras it has and the first weight layout it has (safetensors
// before PyTorch's .bin; Flax, TensorFlow, ONNX and other formats are never
// fetched). index is that layout's index file when it is sharded: its
// shards are added once it is read.
func modelFiles(names []string) (files []string, index string, err error) {
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	if !have["config.json"] {
		return nil, "", fmt.Errorf("no config.json: %w", ErrNoFiles)
	}
	for _, n := range modelExtras() {
		if have[n] {
			files = append(files, n)
		}
	}
	for _, w := range weightLayouts() {
		if have[w] {
			files = append(files, w)
			if strings.HasSuffix(w, ".index.json") {
				index = w
			}
			return files, index, nil
		}
	}
	return nil, "", fmt.Errorf("no weights in a format gochat loads (%s): %w", strings.Join(weightLayouts(), ", "), ErrNoFiles)
}

// maxIndex bounds the size of a sharded checkpoint's index file.
const maxIndex = 64 << 20

// parseIndex returns the shard files named by a sharded checkpoint's index
// ({"weight_map": {"tensor name": "shard file"}}), sorted and distinct,
// relative to the index's folder.
func parseIndex(b []byte) ([]string, error) {
	if len(b) > maxIndex {
		return nil, fmt.Errorf("index of %d bytes exceeds %d", len(b), maxIndex)
	}
	var ix struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if len(ix.WeightMap) == 0 {
		return nil, errors.New("index: empty or missing weight_map")
	}
	var shards []string
	for _, f := range ix.WeightMap {
		if err := checkRelPath(f); err != nil {
			return nil, fmt.Errorf("index: shard: %w", err)
		}
		shards = append(shards, f)
	}
	slices.Sort(shards)
	return slices.Compact(shards), nil
}

// dataExt returns a data file's format by extension: "parquet", "json"
// (.json and .jsonl), or "".
func dataExt(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".parquet":
		return "parquet"
	case ".json", ".jsonl":
		return "json"
	}
	return ""
}

// isDatasetMeta reports the small files of a dataset repository that
// describe it rather than hold rows.
func isDatasetMeta(name string) bool {
	switch path.Base(name) {
	case "README.md", "dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json":
		return true
	}
	return false
}

// hidden reports a path with a part starting with '.' (.gitattributes,
// .github/...).
func hidden(name string) bool {
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// datasetFiles picks the files of a dataset repository to fetch: its
// Parquet files, or its JSON and JSON Lines data files when it has no
// Parquet, plus the README and dataset_info(s).json at the top.
func datasetFiles(names []string) ([]string, error) {
	var parquet, jsonf, meta []string
	for _, n := range names {
		switch {
		case hidden(n):
		case isDatasetMeta(n):
			if !strings.Contains(n, "/") && path.Base(n) != "state.json" && path.Base(n) != "dataset_dict.json" {
				meta = append(meta, n)
			}
		case dataExt(n) == "parquet":
			parquet = append(parquet, n)
		case dataExt(n) == "json":
			jsonf = append(jsonf, n)
		}
	}
	data := parquet
	if len(data) == 0 {
		data = jsonf
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("no Parquet, JSON or JSON Lines files: %w", ErrNoFiles)
	}
	return append(data, meta...), nil
}

// missing says what a cached snapshot lacks for gochat to read it, or ""
// when it is complete. A model needs config.json, one complete weight
// layout, and tokenizer.json or vocab.json unless .no_exist records that
// the repository has neither; a dataset needs a data file.
func missing(t RepoType, repoDir, commit, dir string) string {
	if t == Dataset {
		found := false
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || found {
				return filepath.SkipAll
			}
			if p != dir && strings.HasPrefix(e.Name(), ".") {
				if e.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !e.IsDir() && dataExt(p) != "" && !isDatasetMeta(e.Name()) && exists(p) {
				found = true
			}
			return nil
		})
		if !found {
			return "data files"
		}
		return ""
	}
	if !exists(filepath.Join(dir, "config.json")) {
		return "config.json"
	}
	if !weightsComplete(dir) {
		return "weights"
	}
	absent := func(f string) bool { return exists(filepath.Join(repoDir, ".no_exist", commit, f)) }
	if !exists(filepath.Join(dir, "tokenizer.json")) && !exists(filepath.Join(dir, "vocab.json")) &&
		!(absent("tokenizer.json") && absent("vocab.json")) {
		return "tokenizer files"
	}
	return ""
}

// weightsComplete reports whether dir holds one weight layout in full.
func weightsComplete(dir string) bool {
	for _, w := range weightLayouts() {
		p := filepath.Join(dir, w)
		if !exists(p) {
			continue
		}
		if !strings.HasSuffix(w, ".index.json") {
			return true
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		shards, err := parseIndex(b)
		if err != nil {
			return false
		}
		for _, s := range shards {
			if !exists(filepath.Join(dir, filepath.FromSlash(s))) {
				return false
			}
		}
		return true
	}
	return false
}
