package tensor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// maxIndex bounds the size of a *.index.json file.
const maxIndex = 256 << 20

// readIndex parses a sharded checkpoint's index, {"metadata": {...}, "weight_map": {name: shard}},
// rejecting duplicate names in weight_map.
func readIndex(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndex+1))
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	if len(data) > maxIndex {
		return nil, fileErr(path, "index is larger than %d bytes", maxIndex)
	}
	bad := func(err error) error { return fileErr(path, "invalid index JSON: %v", err) }
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad(fmt.Errorf("want an object, got %v (%v)", tok, err))
	}
	var weightMap map[string]string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		if tok != "weight_map" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad(err)
			}
			continue
		}
		if weightMap != nil {
			return nil, fileErr(path, "index has two weight_map fields")
		}
		if weightMap, err = decodeWeightMap(dec); err != nil {
			return nil, bad(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err)
	}
	if len(weightMap) == 0 {
		return nil, fileErr(path, "index has no weight_map (or an empty one)")
	}
	return weightMap, nil
}

// decodeWeightMap decodes the weight_map object, name to shard file, rejecting duplicate names.
func decodeWeightMap(dec *json.Decoder) (map[string]string, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("weight_map is not an object (%v, %v)", tok, err)
	}
	m := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := tok.(string) // object keys are always strings
		var shard string
		if err := dec.Decode(&shard); err != nil {
			return nil, fmt.Errorf("weight_map[%q]: %v", name, err)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("weight_map lists tensor %q twice", name)
		}
		m[name] = shard
	}
	_, err := dec.Token() // '}'
	return m, err
}

// addIndex opens every shard a sharded checkpoint's index names and adds the tensors the
// weight_map lists, checking that each shard exists and holds each tensor mapped to it. Tensors a
// shard holds but the weight_map does not list are ignored.
func (c *Checkpoint) addIndex(path string) error {
	weightMap, err := readIndex(path)
	if err != nil {
		return err
	}
	byShard := map[string][]string{}
	for name, shard := range weightMap {
		byShard[shard] = append(byShard[shard], name)
	}
	dir := filepath.Dir(path)
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		names := byShard[shard]
		slices.Sort(names)
		if !filepath.IsLocal(shard) {
			return tensorErr(path, names[0], "shard %q is not a file name inside the index's directory", shard)
		}
		sp := filepath.Join(dir, shard)
		if _, err := os.Stat(sp); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fileErr(path, "shard %s (holding %q and %d more tensors) does not exist: %w",
					sp, names[0], len(names)-1, err)
			}
			return &Error{File: path, Err: err}
		}
		es, err := c.openFile(sp)
		if err != nil {
			return err
		}
		inShard := make(map[string]*entry, len(es))
		for _, e := range es {
			inShard[e.info.Name] = e
		}
		for _, name := range names {
			e, ok := inShard[name]
			if !ok {
				return tensorErr(sp, name, "listed in %s but not found in the shard", filepath.Base(path))
			}
			c.entries[name] = e
		}
	}
	return nil
}
