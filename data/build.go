package data

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/gochat-ai/gochat/chattemplate"
)

// Phase is a DeepSpeed-Chat training step; each step reads only its own
// slice of every dataset (see Split).
type Phase int

// Phases.
const (
	PhaseSFT    Phase = 1 // step 1: prompt + chosen, supervised fine-tuning
	PhaseReward Phase = 2 // step 2: chosen and rejected sequences, reward model
	PhasePPO    Phase = 3 // step 3: prompts only, RLHF with PPO
)

func (p Phase) String() string {
	switch p {
	case PhaseSFT:
		return "sft"
	case PhaseReward:
		return "reward"
	case PhasePPO:
		return "ppo"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// roles returns the sample parts a phase needs.
func (p Phase) roles() Role {
	switch p {
	case PhaseSFT:
		return RolePrompt | RoleChosen
	case PhaseReward:
		return RolePrompt | RoleChosen | RoleRejected
	}
	return RolePrompt
}

// DefaultEndText is the end-of-conversation text DeepSpeed-Chat appends to
// both sequences of a reward pair. For OPT it is not a special token: it
// tokenizes to seven ordinary tokens.
const DefaultEndText = "<|endoftext|>"

// RewardText is the text a reward model scores for answer to prompt:
// prompt+answer followed by endText, tokenized as ONE text (step 2 builds
// both sequences of a pair from it; reward.Sequence scores answers with it).
// Tokenizing the parts separately and joining the ids is not the same: a
// byte-level BPE merges across the seams, so an answer ending in "." before
// "<|endoftext|>" gives other ids than the joint text does.
func RewardText(prompt, answer, endText string) string {
	return prompt + answer + endText
}

// IgnoreIndex marks a label that takes no loss (Hugging Face's -100; the
// same value as model.IgnoreIndex).
const IgnoreIndex = -100

// Tokenizer is what data needs from a tokenizer: the ids Hugging Face's
// tokenizer(text)["input_ids"] gives, that is with the BOS token prepended
// when the tokenizer adds one (OPT: add_bos_token) and no EOS appended.
type Tokenizer interface {
	Encode(text string) []int32
}

// PlainEncoder is what a Tokenizer needs for Options.Chat: the ids of
// texts without the special tokens the tokenizer adds around a text
// (Hugging Face's add_special_tokens=False), in order, as transformers'
// apply_chat_template(tokenize=True) tokenizes a rendered conversation.
type PlainEncoder interface {
	EncodePlain(texts []string) [][]int32
}

// BatchEncoder is an optional faster path a Tokenizer may offer: Encode for
// many texts, in order (typically in parallel).
type BatchEncoder interface {
	EncodeBatch(texts []string) [][]int32
}

// Options configure how examples are built and cached.
type Options struct {
	// Split is the --data-split proportions of phases 1, 2 and 3; nil means
	// 2,4,4. It must have three parts.
	Split Split
	// Seed seeds the phase split and the blend shuffle (numpy RandomState
	// semantics; DeepSpeed-Chat's default is 1234).
	Seed uint32
	// MaxSeqLen is the sequence length T of phases 1 and 2; longer
	// sequences are truncated on the right.
	MaxSeqLen int
	// MaxPromptLen is the prompt length of phase 3; longer prompts are
	// dropped and counted.
	MaxPromptLen int
	// MaxAnswerLen is the answer length of phase 3; unsupervised blocks are
	// MaxPromptLen+MaxAnswerLen tokens.
	MaxAnswerLen int
	// AddEOS appends EOS after prompt+chosen in phase 1 (REFERENCE §3:
	// "+ EOS when --add_eot_token"). Recent DeepSpeed-Chat step-1 scripts
	// always append tokenizer.eos_token; set it to match them.
	AddEOS bool
	// EndText is appended to both texts of a phase-2 pair before
	// tokenization; DeepSpeed-Chat uses DefaultEndText.
	EndText string
	// EOS and PAD are the tokenizer's end-of-sequence and padding ids.
	EOS, PAD int32
	// Tokenizer encodes texts; required.
	Tokenizer Tokenizer
	// TokenizerID fingerprints the tokenizer (for example a hash of its
	// files, see HashFiles) for the cache key; "" disables the cache.
	TokenizerID string
	// CacheDir holds the tokenized Arrow IPC cache; "" disables it.
	CacheDir string
	// SkipMalformed counts malformed rows (a cell of the wrong type, invalid
	// UTF-8, a missing key, a bad JSON line) and drops them instead of
	// failing on the first.
	SkipMalformed bool
	// Chat, when set, renders every sample as a chat conversation with a
	// chat template (see ChatFormat) instead of DeepSpeed-Chat's
	// "Human: ... Assistant:" text; the Tokenizer must then be a
	// PlainEncoder. Rows whose prompt is no conversation (Conversation) or
	// that the template refuses are dropped and counted (Stats.Unrendered).
	// EndText is not used; AddEOS still appends EOS, inside the last
	// assistant span.
	Chat *ChatFormat
}

func (o *Options) split() Split {
	if o.Split == nil {
		return Split{2, 4, 4}
	}
	return o.Split
}

func (o *Options) check(p Phase) error {
	if p < PhaseSFT || p > PhasePPO {
		return fmt.Errorf("data: phase %d, want 1, 2 or 3", int(p))
	}
	if o.Tokenizer == nil {
		return fmt.Errorf("data: no tokenizer")
	}
	if s := o.split(); len(s) != 3 {
		return fmt.Errorf("data: split %s has %d parts, want 3 (one per phase)", s, len(s))
	}
	if p != PhasePPO && o.MaxSeqLen < 1 {
		return fmt.Errorf("data: max sequence length %d, want >= 1", o.MaxSeqLen)
	}
	if p == PhasePPO && o.MaxPromptLen < 1 {
		return fmt.Errorf("data: max prompt length %d, want >= 1", o.MaxPromptLen)
	}
	if _, ok := o.Tokenizer.(PlainEncoder); o.Chat != nil && !ok {
		return fmt.Errorf("data: a chat template needs a tokenizer that encodes without special tokens (PlainEncoder)")
	}
	return nil
}

// Example is one tokenized training example, unpadded (Collator pads it).
type Example struct {
	// IDs: phase 1, prompt+chosen (+EOS) truncated to MaxSeqLen; phase 2,
	// the chosen sequence prompt+chosen+EndText truncated to MaxSeqLen;
	// phase 3, the prompt (at most MaxPromptLen tokens); unsupervised, one
	// block. All start with BOS when the tokenizer adds one.
	IDs []int32
	// Rejected is phase 2's prompt+rejected+EndText, truncated.
	Rejected []int32
	// PromptLen (phase 1) is how many leading IDs belong to the prompt: the
	// common prefix of the prompt's own encoding and IDs. With a chat
	// template it is where the first loss span starts.
	PromptLen int
	// Spans (phase 1 with a chat template) are the token ranges [start,
	// end) of the assistant messages, in pairs: the positions that carry
	// the loss with Collator.ResponseOnly. nil without a template.
	Spans []int32
	// Messages (phase 3 with a chat template) is the conversation the
	// prompt renders, for rendering an answer to it (ChatFormat.Reply).
	Messages []chattemplate.Message
	// Row is the 0-based index of the source row in its raw split (files in
	// order); -1 for unsupervised blocks.
	Row int64
	// Dataset is the index of the source dataset in a blend.
	Dataset int
}

// Stats count what happened to the rows of one dataset part in one phase.
type Stats struct {
	Dataset string `json:"dataset"`
	Part    string `json:"part"`
	Phase   int    `json:"phase"`
	// Rows is the number of rows of the part (after the 9:1 train/eval cut
	// for train-only datasets); Selected those in this phase's slice.
	Rows     int64 `json:"rows"`
	Selected int64 `json:"selected"`
	// Kept examples; dropped rows by reason: a null cell the phase needs,
	// malformed (SkipMalformed), a phase-3 prompt over MaxPromptLen.
	Kept      int64 `json:"kept"`
	Empty     int64 `json:"empty"`
	Malformed int64 `json:"malformed"`
	TooLong   int64 `json:"too_long"`
	// Nulls counts the Empty rows by the first null column the phase
	// needs (for the messages that say why rows were dropped).
	Nulls map[string]int64 `json:"nulls,omitempty"`
	// Truncated counts kept phase 1-2 examples cut at MaxSeqLen.
	Truncated int64 `json:"truncated"`
	// Unrendered counts rows dropped under a chat template (Options.Chat):
	// a prompt that is no conversation of alternating turns, or one the
	// template refused (raise_exception); RenderErrors holds the first
	// few messages.
	Unrendered   int64    `json:"unrendered,omitempty"`
	RenderErrors []string `json:"render_errors,omitempty"`
	// LastTurnOnly counts kept phase-1 examples whose loss is on the last
	// assistant turn only, because the template renders earlier turns
	// differently once later turns follow (ChatFormat.SFT).
	LastTurnOnly int64 `json:"last_turn_only,omitempty"`
	// Errors holds the first few malformed-row messages.
	Errors []string `json:"errors,omitempty"`
	// Cached is true when the examples came from the cache.
	Cached bool `json:"-"`
}

// null counts a row dropped for a null cell in column col.
func (st *Stats) null(col string) {
	st.Empty++
	if st.Nulls == nil {
		st.Nulls = map[string]int64{}
	}
	st.Nulls[col]++
}

// unrendered counts a row dropped under a chat template.
func (st *Stats) unrendered(err error) {
	st.Unrendered++
	if len(st.RenderErrors) < maxErrors {
		st.RenderErrors = append(st.RenderErrors, err.Error())
	}
}

// maxErrors is how many malformed-row messages Stats keep.
const maxErrors = 5

// Set is the examples of one phase, in order.
type Set struct {
	Phase    Phase
	Examples []Example
	// Stats has one entry per dataset (and SFT-only dataset) in the set.
	Stats []Stats
}

// encodeChunk is the number of samples tokenized together.
const encodeChunk = 512

func encodeAll(tok Tokenizer, texts []string) ([][]int32, error) {
	if b, ok := tok.(BatchEncoder); ok {
		out := b.EncodeBatch(texts)
		if len(out) != len(texts) {
			return nil, fmt.Errorf("data: tokenizer returned %d encodings for %d texts", len(out), len(texts))
		}
		return out, nil
	}
	out := make([][]int32, len(texts))
	for i, t := range texts {
		out[i] = tok.Encode(t)
	}
	return out, nil
}

// phaseTexts returns the texts a phase tokenizes for one sample.
func phaseTexts(p Phase, s *Sample, o *Options) []string {
	switch p {
	case PhaseSFT:
		return []string{s.PromptChosen, s.Prompt}
	case PhaseReward:
		// PromptChosen is the prompt and the answer already joined (Sample):
		// Prompt+Chosen, or for yitingxie/rlhf-reward-datasets the raw
		// prompt+response.
		return []string{RewardText(s.PromptChosen, "", o.EndText), RewardText(s.PromptRejected, "", o.EndText)}
	}
	return []string{s.Prompt}
}

// truncate returns ids cut to n tokens, copied so the tail is not kept alive.
func truncate(ids []int32, n int) ([]int32, bool) {
	if len(ids) <= n {
		return ids, false
	}
	return append([]int32(nil), ids[:n]...), true
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// unit is what one sample gives a phase to tokenize, and what building
// its example from the encodings needs.
type unit struct {
	texts []string
	// With a chat template, phase 1: bounds are the loss spans' byte
	// offsets in texts[0], start and end in pairs; at[k] is the index in
	// texts of texts[0][:bounds[k]] (not tokenized when the offset is 0 or
	// the text's end).
	bounds, at []int
	lastOnly   bool
	// msgs is phase 3's conversation with a chat template.
	msgs []chattemplate.Message
}

// prepare returns what a phase tokenizes for one sample: phaseTexts, or
// with a chat template the rendered conversation (see ChatFormat) and,
// for phase 1, its prefixes at the loss spans' bounds. The error says why
// a sample cannot be rendered.
func prepare(p Phase, s *Sample, o *Options) (unit, error) {
	if o.Chat == nil {
		return unit{texts: phaseTexts(p, s, o)}, nil
	}
	msgs, err := Conversation(s.Prompt)
	if err != nil {
		return unit{}, err
	}
	switch p {
	case PhaseSFT:
		text, spans, lastOnly, err := o.Chat.SFT(msgs, Answer(s.Chosen))
		if err != nil {
			return unit{}, err
		}
		u := unit{texts: []string{text}, lastOnly: lastOnly}
		for _, sp := range spans {
			for _, b := range sp {
				u.bounds = append(u.bounds, b)
				if b == 0 || b == len(text) {
					u.at = append(u.at, -1)
					continue
				}
				u.at = append(u.at, len(u.texts))
				u.texts = append(u.texts, text[:b])
			}
		}
		return u, nil
	case PhaseReward:
		c, err := o.Chat.Reply(msgs, Answer(s.Chosen))
		if err != nil {
			return unit{}, err
		}
		r, err := o.Chat.Reply(msgs, Answer(s.Rejected))
		if err != nil {
			return unit{}, err
		}
		return unit{texts: []string{c, r}}, nil
	}
	t, err := o.Chat.Prompt(msgs)
	if err != nil {
		return unit{}, err
	}
	return unit{texts: []string{t}, msgs: msgs}, nil
}

// encodeFor encodes texts for o: with a chat template without the
// tokenizer's special tokens (PlainEncoder), else with them.
func encodeFor(o *Options, texts []string) ([][]int32, error) {
	if o.Chat == nil {
		return encodeAll(o.Tokenizer, texts)
	}
	out := o.Tokenizer.(PlainEncoder).EncodePlain(texts)
	if len(out) != len(texts) {
		return nil, fmt.Errorf("data: tokenizer returned %d encodings for %d texts", len(out), len(texts))
	}
	return out, nil
}

// buildExample makes a phase's example from the encodings of u.texts.
// keep is false for a phase-3 prompt longer than MaxPromptLen.
//
// With a chat template, a loss span's byte offset b in the text maps to
// the length of the common prefix of Encode(text[:b]) and Encode(text):
// the tokens wholly before b when tokenization does not merge across b,
// which holds at the real templates' turn boundaries (special tokens,
// newlines); a token that crosses a span's start is in the span, one that
// crosses its end is not.
func buildExample(p Phase, u *unit, enc [][]int32, o *Options) (ex Example, keep, truncated bool) {
	switch {
	case p == PhaseSFT && o.Chat != nil:
		full := enc[0]
		pos := func(k int) int {
			switch b := u.bounds[k]; {
			case b == 0:
				return 0
			case b == len(u.texts[0]):
				return len(full)
			}
			return commonPrefix(enc[u.at[k]], full)
		}
		ids := full
		if o.AddEOS {
			ids = append(ids[:len(ids):len(ids)], o.EOS)
		}
		ids, truncated = truncate(ids, o.MaxSeqLen)
		var spans []int32
		for k := 0; k+1 < len(u.bounds); k += 2 {
			s, e := pos(k), pos(k+1)
			if o.AddEOS && e == len(full) {
				e++ // the appended EOS ends the answer
			}
			s, e = min(s, len(ids)), min(e, len(ids))
			if s < e {
				spans = append(spans, int32(s), int32(e))
			}
		}
		ex = Example{IDs: ids, PromptLen: len(ids), Spans: spans}
		if spans == nil {
			ex.Spans = []int32{} // a template example: no span fits
		} else {
			ex.PromptLen = int(spans[0])
		}
		return ex, true, truncated
	case p == PhaseSFT:
		ids := enc[0]
		if o.AddEOS {
			ids = append(ids[:len(ids):len(ids)], o.EOS)
		}
		ids, truncated = truncate(ids, o.MaxSeqLen)
		return Example{IDs: ids, PromptLen: commonPrefix(enc[1], ids)}, true, truncated
	case p == PhaseReward:
		c, tc := truncate(enc[0], o.MaxSeqLen)
		r, tr := truncate(enc[1], o.MaxSeqLen)
		return Example{IDs: c, Rejected: r}, true, tc || tr
	}
	if len(enc[0]) > o.MaxPromptLen {
		return Example{}, false, false
	}
	return Example{IDs: enc[0], Messages: u.msgs}, true, false
}

// NewExample tokenizes one sample for a phase with the semantics of Build.
// keep is false when a phase-3 prompt is longer than MaxPromptLen. With a
// chat template, a sample that cannot be rendered is an error.
func NewExample(s Sample, p Phase, o Options) (ex Example, keep bool, err error) {
	if err := o.check(p); err != nil {
		return Example{}, false, err
	}
	u, err := prepare(p, &s, &o)
	if err != nil {
		return Example{}, false, err
	}
	enc, err := encodeFor(&o, u.texts)
	if err != nil {
		return Example{}, false, err
	}
	ex, keep, _ = buildExample(p, &u, enc, &o)
	return ex, keep, nil
}

// assignment places every raw row of a part in a phase: phase[g] is 0, 1 or
// 2 (or -1 for rows outside the part), pos[g] the row's position in its
// phase's order, n[k] the size of phase k.
type assignment struct {
	phase []int8
	pos   []int32
	n     [3]int
}

// assign mirrors DeepSpeed-Chat: a train-only dataset is first cut 9:1 into
// train and eval (a seeded permutation, split "train_eval"), then the part's
// rows are permuted with the seed and cut into the three phase slices.
func assign(rows int64, evalFromTrain bool, part Part, split Split, seed uint32) (assignment, error) {
	if rows > 1<<31-1 {
		return assignment{}, fmt.Errorf("data: %d rows is more than this reader supports (2^31-1)", rows)
	}
	n := int(rows)
	var base []int // part position -> raw row
	if evalFromTrain {
		base = Split{9, 1}.Slice(seed, n, int(part))
	} else {
		base = make([]int, n)
		for i := range base {
			base[i] = i
		}
	}
	a := assignment{phase: make([]int8, n), pos: make([]int32, n)}
	for i := range a.phase {
		a.phase[i] = -1
	}
	b := split.Bounds(len(base))
	perm := Permutation(seed, len(base))
	for k := 0; k < len(split); k++ {
		lo, hi := max(b[k], 0), min(b[k+1], len(base))
		for i := lo; i < hi; i++ {
			g := base[perm[i]]
			a.phase[g], a.pos[g] = int8(k), int32(i-lo)
			a.n[k]++
		}
	}
	return a, nil
}

// partRows counts the rows of a part's files.
func partRows(files []string) (int64, error) {
	var n int64
	for _, f := range files {
		c, err := CountRows(f)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// scanFiles streams the rows of files in order, numbering them g across
// files.
func scanFiles(files []string, cols []Column, fn func(g int64, cells []Cell, bad error) error) error {
	var g int64
	for _, f := range files {
		err := ScanRows(f, cols, func(_ int64, cells []Cell, bad error) error {
			err := fn(g, cells, bad)
			g++
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// job is one selected row waiting to be tokenized.
type job struct {
	pos int32
	row int64
	s   Sample
}

// Build tokenizes one part of one dataset for a phase. It reads the files
// once, streaming record batches, and keeps only the tokens of the rows in
// the phase's slice. The result is cached under o.CacheDir (keyed by the
// files' paths, sizes and SHA-256 digests, the adapter, split, phase,
// seed, tokenizer and lengths), and a later call with the same key reads
// the cache without tokenizing (it reads the files once to hash them). A dataset without the part (no eval split)
// gives an empty set.
func Build(ds *Dataset, part Part, phase Phase, o Options) (*Set, error) {
	if err := o.check(phase); err != nil {
		return nil, err
	}
	a := ds.Adapter
	for _, r := range []Role{RolePrompt, RoleChosen, RoleRejected} {
		if phase.roles()&r != 0 && !a.HasRole(r) {
			return nil, fmt.Errorf("dataset %s: phase %d needs a %s column, and the mapping has none", ds.Name, int(phase), roleName(r))
		}
	}
	split, files, ok := ds.PartFiles(part)
	st := Stats{Dataset: ds.Name, Part: part.String(), Phase: int(phase)}
	if !ok {
		if part == Train {
			return nil, fmt.Errorf("dataset %s: no %q split (found %s)", ds.Name, split, splitNames(ds))
		}
		return &Set{Phase: phase, Stats: []Stats{st}}, nil
	}
	var key, cachePath string
	if o.CacheDir != "" && o.TokenizerID != "" {
		var err error
		key, err = cacheKey(ds, part, phase, files, &o)
		if err != nil {
			return nil, err
		}
		cachePath = filepath.Join(o.CacheDir, cacheName(key))
		if set, ok := readCache(cachePath, key); ok {
			return set, nil
		}
	}
	rows, err := partRows(files)
	if err != nil {
		return nil, err
	}
	asg, err := assign(rows, a.EvalFromTrain, part, o.split(), o.Seed)
	if err != nil {
		return nil, err
	}
	k := int8(phase - 1)
	st.Rows = int64(asg.n[0] + asg.n[1] + asg.n[2])
	st.Selected = int64(asg.n[k])
	slots := make([]Example, asg.n[k])
	filled := make([]bool, asg.n[k])
	var pending []job
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		var texts []string
		units := make([]unit, len(pending))
		ok := make([]bool, len(pending))
		at := make([]int, len(pending)+1)
		for i := range pending {
			at[i] = len(texts)
			u, err := prepare(phase, &pending[i].s, &o)
			if err != nil {
				st.unrendered(fmt.Errorf("dataset %s: row %d: %w", ds.Name, pending[i].row+1, err))
				continue
			}
			units[i], ok[i] = u, true
			texts = append(texts, u.texts...)
		}
		at[len(pending)] = len(texts)
		enc, err := encodeFor(&o, texts)
		if err != nil {
			return err
		}
		built := make([]Example, 0, len(pending))
		total := 0
		for i, j := range pending {
			if !ok[i] {
				continue
			}
			ex, keep, tr := buildExample(phase, &units[i], enc[at[i]:at[i+1]], &o)
			if !keep {
				st.TooLong++
				continue
			}
			if tr {
				st.Truncated++
			}
			if units[i].lastOnly {
				st.LastTurnOnly++
			}
			ex.Row = j.row
			built = append(built, ex)
			total += len(ex.IDs) + len(ex.Rejected)
		}
		// Copy the kept ids into one block: the tokenizer's buffers (and the
		// phase-1 prompt encodings) are not kept alive.
		block := make([]int32, 0, total)
		for i, j := 0, 0; i < len(pending); i++ {
			if j == len(built) || built[j].Row != pending[i].row {
				continue
			}
			ex := &built[j]
			k := len(block)
			block = append(block, ex.IDs...)
			ex.IDs = block[k:len(block):len(block)]
			if phase == PhaseReward {
				k = len(block)
				block = append(block, ex.Rejected...)
				ex.Rejected = block[k:len(block):len(block)]
			}
			slots[pending[i].pos], filled[pending[i].pos] = *ex, true
			j++
		}
		pending = pending[:0]
		return nil
	}
	malformed := func(err error) error {
		if !o.SkipMalformed {
			return err
		}
		st.Malformed++
		if len(st.Errors) < maxErrors {
			st.Errors = append(st.Errors, err.Error())
		}
		return nil
	}
	err = scanFiles(files, a.Columns, func(g int64, cells []Cell, bad error) error {
		inPhase := asg.phase[g] == k
		if bad != nil {
			if !inPhase && o.SkipMalformed {
				return nil
			}
			return malformed(bad)
		}
		if !inPhase {
			return nil
		}
		if col, ok := a.needs(cells, phase); !ok {
			st.null(col)
			return nil
		}
		s, err := a.Convert(cells)
		if err != nil {
			return malformed(fmt.Errorf("dataset %s: row %d: %w", ds.Name, g+1, err))
		}
		pending = append(pending, job{pos: asg.pos[g], row: g, s: s})
		if len(pending) == encodeChunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	set := &Set{Phase: phase}
	for i, ok := range filled {
		if ok {
			set.Examples = append(set.Examples, slots[i])
		}
	}
	st.Kept = int64(len(set.Examples))
	set.Stats = []Stats{st}
	if cachePath != "" {
		if err := writeCache(cachePath, key, set, o.Chat != nil); err != nil {
			return nil, err
		}
	}
	return set, nil
}

func roleName(r Role) string {
	switch r {
	case RolePrompt:
		return "prompt"
	case RoleChosen:
		return "chosen"
	}
	return "rejected"
}

func splitNames(ds *Dataset) string {
	var s []string
	for k := range ds.Splits {
		s = append(s, k)
	}
	if len(s) == 0 {
		return "none"
	}
	sort.Strings(s)
	return fmt.Sprint(s)
}

// Load builds the train and eval sets of a phase from one or more datasets.
// Several datasets are blended the way DeepSpeed-Chat blends them: their
// examples are concatenated in order and shuffled with Permutation(seed, n).
// In phase 1, sftOnly datasets are added whole (split 10,0,0) and the result
// is shuffled again.
func Load(datasets []*Dataset, sftOnly []*Dataset, phase Phase, o Options) (train, eval *Set, err error) {
	if len(datasets) == 0 {
		return nil, nil, fmt.Errorf("data: no datasets")
	}
	build := func(dss []*Dataset, part Part, o Options, offset int, blend bool) (*Set, error) {
		out := &Set{Phase: phase}
		for i, ds := range dss {
			s, err := Build(ds, part, phase, o)
			if err != nil {
				return nil, err
			}
			for j := range s.Examples {
				s.Examples[j].Dataset = offset + i
			}
			out.Examples = append(out.Examples, s.Examples...)
			out.Stats = append(out.Stats, s.Stats...)
		}
		if blend && len(dss) > 1 {
			shuffle(out, o.Seed)
		}
		return out, nil
	}
	sets := [2]*Set{}
	for _, part := range []Part{Train, Eval} {
		s, err := build(datasets, part, o, 0, true)
		if err != nil {
			return nil, nil, err
		}
		if phase == PhaseSFT && len(sftOnly) > 0 {
			so := o
			so.Split = Split{10, 0, 0}
			extra, err := build(sftOnly, part, so, len(datasets), false)
			if err != nil {
				return nil, nil, err
			}
			// DeepSpeed-Chat concatenates the SFT-only datasets unshuffled,
			// appends them and shuffles the whole.
			s.Examples = append(s.Examples, extra.Examples...)
			shuffle(s, o.Seed)
			s.Stats = append(s.Stats, extra.Stats...)
		}
		sets[part] = s
	}
	return sets[Train], sets[Eval], nil
}

// shuffle reorders a set's examples by Permutation(seed, n).
func shuffle(s *Set, seed uint32) {
	perm := Permutation(seed, len(s.Examples))
	out := make([]Example, len(perm))
	for i, p := range perm {
		out[i] = s.Examples[p]
	}
	s.Examples = out
}
