package data

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// The tokenized cache is one Arrow IPC file per (dataset part, phase, key):
//
//	row        int64        source row in the raw split (-1 for blocks)
//	ids        list<int32>  Example.IDs, unpadded
//	rejected   list<int32>  Example.Rejected (phase 2; null otherwise)
//	prompt_len int32        Example.PromptLen
//
// and, for sets built with a chat template (Options.Chat), two more:
//
//	spans      list<int32>  Example.Spans (phase 1; null otherwise)
//	messages   utf8         Example.Messages as JSON (phase 3; null otherwise)
//
// with the key text and the JSON Stats in the schema metadata. Files are
// written to a temporary name in the cache folder and renamed into place, so
// a reader never sees a partial file and a failed build writes nothing.

// cacheVersion changes whenever the meaning of cached examples changes.
const cacheVersion = 2 // 2: Stats.Nulls

// cacheRows is the number of examples per record batch in a cache file.
const cacheRows = 4096

const (
	metaKey   = "gochat.data.key"
	metaStats = "gochat.data.stats"
)

// DefaultCacheDir returns the tokenized-data cache folder:
// $GOCHAT_CACHE/data, else $XDG_CACHE_HOME/gochat/data, else
// ~/.cache/gochat/data. getenv nil means os.Getenv.
func DefaultCacheDir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if d := getenv("GOCHAT_CACHE"); d != "" {
		return filepath.Join(d, "data")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "gochat", "data")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".cache", "gochat", "data")
}

// HashFiles returns a hex SHA-256 over the names and contents of the files
// that exist among paths (missing ones are skipped); use it to fingerprint a
// tokenizer directory for Options.TokenizerID.
func HashFiles(paths ...string) (string, error) {
	h := sha256.New()
	found := 0
	for _, p := range paths {
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", filepath.Base(p))
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
		h.Write([]byte{0})
		found++
	}
	if found == 0 {
		return "", fmt.Errorf("hashing: none of %s exists", strings.Join(paths, ", "))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileDigests describes files by absolute path, size and the SHA-256 of
// their bytes. The key is the content, not the modification time: an edit
// that keeps the size and restores the time still changes the key, and a
// touched file with the same bytes still hits. Hashing streams each file
// once through a 1 MiB buffer, far cheaper than tokenizing it.
func fileDigests(b *strings.Builder, files []string) error {
	buf := make([]byte, 1<<20)
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return err
		}
		in, err := os.Open(f)
		if err != nil {
			return fmt.Errorf("data cache: %w", err)
		}
		h := sha256.New()
		n, err := io.CopyBuffer(h, in, buf)
		in.Close()
		if err != nil {
			return fmt.Errorf("data cache: hashing %s: %w", f, err)
		}
		fmt.Fprintf(b, "file %q %d sha256 %x\n", abs, n, h.Sum(nil))
	}
	return nil
}

// cacheKey is the text that identifies a cached part: everything its
// examples depend on, and nothing else.
func cacheKey(ds *Dataset, part Part, phase Phase, files []string, o *Options) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "gochat data cache v%d\n", cacheVersion)
	fmt.Fprintf(&b, "adapter %q eval_from_train=%v\n", ds.Adapter.Name, ds.Adapter.EvalFromTrain)
	for _, c := range ds.Adapter.Columns {
		fmt.Fprintf(&b, "column %q %s %d\n", c.Name, c.Kind, c.Role)
	}
	fmt.Fprintf(&b, "part %s\n", part)
	if err := fileDigests(&b, files); err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "phase %d split %s seed %d\n", int(phase), o.split(), o.Seed)
	fmt.Fprintf(&b, "tokenizer %q\n", o.TokenizerID)
	fmt.Fprintf(&b, "skip_malformed %v\n", o.SkipMalformed)
	if o.Chat != nil {
		// Only templated sets have this line: the keys of DeepSpeed-Chat
		// text sets are those of gochat before chat templates.
		fmt.Fprintf(&b, "chat_template %s\n", o.Chat.Digest())
	}
	switch phase {
	case PhaseSFT:
		fmt.Fprintf(&b, "max_seq_len %d add_eos %v eos %d\n", o.MaxSeqLen, o.AddEOS, o.EOS)
	case PhaseReward:
		fmt.Fprintf(&b, "max_seq_len %d end_text %q\n", o.MaxSeqLen, o.EndText)
	case PhasePPO:
		fmt.Fprintf(&b, "max_prompt_len %d\n", o.MaxPromptLen)
	}
	return b.String(), nil
}

func cacheName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:20]) + ".arrow"
}

func cacheSchema(key string, stats []byte, chat bool) *arrow.Schema {
	md := arrow.NewMetadata([]string{metaKey, metaStats}, []string{key, string(stats)})
	fields := []arrow.Field{
		{Name: "row", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "rejected", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "prompt_len", Type: arrow.PrimitiveTypes.Int32},
	}
	if chat {
		fields = append(fields,
			arrow.Field{Name: "spans", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
			arrow.Field{Name: "messages", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	return arrow.NewSchema(fields, &md)
}

// writeCache stores a set under path atomically; chat says it was built
// with a chat template (the spans and messages columns).
func writeCache(path, key string, set *Set, chat bool) (err error) {
	stats, err := json.Marshal(set.Stats)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*.arrow")
	if err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	schema := cacheSchema(key, stats, chat)
	w, err := ipc.NewFileWriter(tmp, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	rowB := rb.Field(0).(*array.Int64Builder)
	idsB := rb.Field(1).(*array.ListBuilder)
	idsV := idsB.ValueBuilder().(*array.Int32Builder)
	rejB := rb.Field(2).(*array.ListBuilder)
	rejV := rejB.ValueBuilder().(*array.Int32Builder)
	plB := rb.Field(3).(*array.Int32Builder)
	var spB *array.ListBuilder
	var spV *array.Int32Builder
	var msgB *array.StringBuilder
	if chat {
		spB = rb.Field(4).(*array.ListBuilder)
		spV = spB.ValueBuilder().(*array.Int32Builder)
		msgB = rb.Field(5).(*array.StringBuilder)
	}
	emit := func() error {
		rec := rb.NewRecord()
		defer rec.Release()
		return w.Write(rec)
	}
	for i, ex := range set.Examples {
		rowB.Append(ex.Row)
		idsB.Append(true)
		idsV.AppendValues(ex.IDs, nil)
		if set.Phase == PhaseReward {
			rejB.Append(true)
			rejV.AppendValues(ex.Rejected, nil)
		} else {
			rejB.AppendNull()
		}
		plB.Append(int32(ex.PromptLen))
		if chat {
			if ex.Spans != nil {
				spB.Append(true)
				spV.AppendValues(ex.Spans, nil)
			} else {
				spB.AppendNull()
			}
			if ex.Messages != nil {
				m, err := json.Marshal(ex.Messages)
				if err != nil {
					return fmt.Errorf("data cache: %w", err)
				}
				msgB.Append(string(m))
			} else {
				msgB.AppendNull()
			}
		}
		if (i+1)%cacheRows == 0 {
			if err := emit(); err != nil {
				return fmt.Errorf("data cache: %w", err)
			}
		}
	}
	if len(set.Examples)%cacheRows != 0 || len(set.Examples) == 0 {
		if err := emit(); err != nil {
			return fmt.Errorf("data cache: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("data cache: %w", err)
	}
	return nil
}

// readCache loads a cached set; ok is false when the file is missing,
// unreadable or was written for another key.
func readCache(path, key string) (set *Set, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	defer func() {
		if recover() != nil { // a corrupt cache file is a miss
			set, ok = nil, false
		}
	}()
	r, err := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, false
	}
	defer r.Close()
	md := r.Schema().Metadata()
	if i := md.FindKey(metaKey); i < 0 || md.Values()[i] != key {
		return nil, false
	}
	set = &Set{}
	if i := md.FindKey(metaStats); i < 0 || json.Unmarshal([]byte(md.Values()[i]), &set.Stats) != nil || len(set.Stats) == 0 {
		return nil, false
	}
	set.Phase = Phase(set.Stats[0].Phase)
	for i := range set.Stats {
		set.Stats[i].Cached = true
	}
	for b := 0; b < r.NumRecords(); b++ {
		rec, err := r.Record(b)
		if err != nil || (rec.NumCols() != 4 && rec.NumCols() != 6) {
			return nil, false
		}
		rows, ok1 := rec.Column(0).(*array.Int64)
		ids, ok2 := rec.Column(1).(*array.List)
		rej, ok3 := rec.Column(2).(*array.List)
		pl, ok4 := rec.Column(3).(*array.Int32)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, false
		}
		idsVals, ok5 := ids.ListValues().(*array.Int32)
		rejVals, ok6 := rej.ListValues().(*array.Int32)
		if !ok5 || !ok6 {
			return nil, false
		}
		// One copy per record batch; examples are sub-slices of it.
		idsBuf := append([]int32(nil), idsVals.Int32Values()...)
		rejBuf := append([]int32(nil), rejVals.Int32Values()...)
		var spans *array.List
		var spBuf []int32
		var msgs *array.String
		if rec.NumCols() == 6 {
			var ok7, ok8 bool
			spans, ok7 = rec.Column(4).(*array.List)
			msgs, ok8 = rec.Column(5).(*array.String)
			if !ok7 || !ok8 {
				return nil, false
			}
			spVals, ok9 := spans.ListValues().(*array.Int32)
			if !ok9 {
				return nil, false
			}
			spBuf = append([]int32{}, spVals.Int32Values()...)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			ex := Example{Row: rows.Value(i), PromptLen: int(pl.Value(i))}
			s, e := ids.ValueOffsets(i)
			ex.IDs = idsBuf[s:e:e]
			if rej.IsValid(i) {
				s, e := rej.ValueOffsets(i)
				ex.Rejected = rejBuf[s:e:e]
			}
			if spans != nil && spans.IsValid(i) {
				s, e := spans.ValueOffsets(i)
				ex.Spans = spBuf[s:e:e]
			}
			if msgs != nil && msgs.IsValid(i) {
				if json.Unmarshal([]byte(msgs.Value(i)), &ex.Messages) != nil {
					return nil, false
				}
			}
			set.Examples = append(set.Examples, ex)
		}
	}
	var kept int64
	for _, s := range set.Stats {
		kept += s.Kept
	}
	if kept != int64(len(set.Examples)) {
		return nil, false
	}
	return set, true
}
