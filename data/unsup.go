package data

import (
	"fmt"
	"path/filepath"
	"strings"
)

// unsupGroup is the number of consecutive texts concatenated before cutting
// blocks: Hugging Face datasets.map(batched=True)'s default batch size, which
// DeepSpeed-Chat's group_texts runs under.
const unsupGroup = 1000

// groupBlocks concatenates the encodings of one group of texts and cuts them
// into blocks of size tokens, dropping the remainder; a group shorter than
// one block becomes one short block (DeepSpeed-Chat's group_texts).
func groupBlocks(enc [][]int32, size int) [][]int32 {
	total := 0
	for _, e := range enc {
		total += len(e)
	}
	if total == 0 {
		return nil
	}
	if total >= size {
		total = total / size * size
	}
	buf := make([]int32, 0, total)
	for _, e := range enc {
		if len(buf)+len(e) > total {
			buf = append(buf, e[:total-len(buf)]...)
			break
		}
		buf = append(buf, e...)
	}
	var out [][]int32
	for i := 0; i < total; i += size {
		out = append(out, buf[i:min(i+size, total):min(i+size, total)])
	}
	return out
}

// UnsupervisedColumn picks the text column of a dataset the way
// DeepSpeed-Chat does: "text" when the first train file has it, else its
// first column.
func UnsupervisedColumn(ds *Dataset) (string, error) {
	_, files, ok := ds.PartFiles(Train)
	if !ok || len(files) == 0 {
		return "", fmt.Errorf("dataset %s: no train split", ds.Name)
	}
	fields, err := ReadSchema(files[0])
	if err != nil {
		return "", err
	}
	if len(fields) == 0 {
		return "", fmt.Errorf("%s: no columns", files[0])
	}
	for _, f := range fields {
		if f.Name == "text" {
			return "text", nil
		}
	}
	return fields[0].Name, nil
}

// LoadUnsupervised builds the unsupervised (mixture) data of phase 3 from
// the train split of a plain-text dataset: each text of column is tokenized
// (with BOS, as Hugging Face's tokenizer adds it), groups of 1000
// consecutive texts are concatenated and cut into blocks of
// MaxPromptLen+MaxAnswerLen tokens. Collator.Blocks batches them with
// labels equal to the ids. The dataset's adapter is ignored; column ""
// picks one with UnsupervisedColumn. Blocks are cached like Build's sets.
func LoadUnsupervised(ds *Dataset, column string, o Options) (*Set, error) {
	size := o.MaxPromptLen + o.MaxAnswerLen
	if size < 1 || o.MaxPromptLen < 0 || o.MaxAnswerLen < 0 {
		return nil, fmt.Errorf("data: unsupervised block size %d+%d, want >= 1", o.MaxPromptLen, o.MaxAnswerLen)
	}
	if o.Tokenizer == nil {
		return nil, fmt.Errorf("data: no tokenizer")
	}
	if column == "" {
		var err error
		if column, err = UnsupervisedColumn(ds); err != nil {
			return nil, err
		}
	}
	a := textAdapter(column)
	tds := *ds
	tds.Adapter = a
	_, files, ok := tds.PartFiles(Train)
	if !ok {
		return nil, fmt.Errorf("dataset %s: no train split", ds.Name)
	}
	st := Stats{Dataset: ds.Name, Part: Train.String(), Phase: 0}
	var key, cachePath string
	if o.CacheDir != "" && o.TokenizerID != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "gochat data cache v%d\nunsupervised column %q block %d\n", cacheVersion, column, size)
		if err := fileDigests(&b, files); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "tokenizer %q\nskip_malformed %v\n", o.TokenizerID, o.SkipMalformed)
		key = b.String()
		cachePath = filepath.Join(o.CacheDir, cacheName(key))
		if set, ok := readCache(cachePath, key); ok {
			return set, nil
		}
	}
	set := &Set{}
	var texts []string
	inGroup := 0
	flush := func() error {
		enc, err := encodeAll(o.Tokenizer, texts)
		if err != nil {
			return err
		}
		for _, blk := range groupBlocks(enc, size) {
			set.Examples = append(set.Examples, Example{IDs: blk, Row: -1})
		}
		texts, inGroup = texts[:0], 0
		return nil
	}
	err := scanFiles(files, a.Columns, func(g int64, cells []Cell, bad error) error {
		st.Rows++
		inGroup++
		switch {
		case bad != nil:
			if !o.SkipMalformed {
				return bad
			}
			st.Malformed++
			if len(st.Errors) < maxErrors {
				st.Errors = append(st.Errors, bad.Error())
			}
		case cells[0].Null:
			st.null(column)
		default:
			texts = append(texts, cells[0].Str)
		}
		if inGroup == unsupGroup {
			return flush()
		}
		return nil
	})
	if err == nil && inGroup > 0 {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	st.Selected = st.Rows
	st.Kept = int64(len(set.Examples))
	set.Stats = []Stats{st}
	if cachePath != "" {
		if err := writeCache(cachePath, key, set, false); err != nil {
			return nil, err
		}
	}
	return set, nil
}
