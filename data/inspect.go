package data

import (
	"fmt"
	"sort"
)

// InspectOptions configure Inspect. The fields mean what they mean in
// Options; Tokenizer may be nil (no token statistics, no too-long counts).
type InspectOptions struct {
	Split        Split
	Seed         uint32
	MaxSeqLen    int
	MaxPromptLen int
	AddEOS       bool
	EndText      string
	EOS          int32
	Tokenizer    Tokenizer
	// Chat renders the samples with a chat template (Options.Chat); it
	// needs a Tokenizer.
	Chat *ChatFormat
	// Examples is the number of examples kept per phase: 0 means 3, a
	// negative number none.
	Examples int
}

// Report describes a dataset: its files and schema, and per part and phase
// the row counts, what was dropped and why, token lengths and examples.
type Report struct {
	Dataset string
	Adapter *Adapter
	Root    string
	Ignored []string
	Parts   []PartReport
	// Tokenized is true when a tokenizer was given; Chat when the phases
	// were built with a chat template.
	Tokenized, Chat bool
}

// PartReport is one part (train or eval) of a dataset.
type PartReport struct {
	Part    Part
	Split   string // raw split read
	Missing bool   // the dataset has no such split
	Files   []string
	Schema  []Field // of the first file
	Rows    int64   // rows in the part (after a 9:1 cut)
	Phases  [3]PhaseReport
}

// PhaseReport is one phase's slice of a part.
type PhaseReport struct {
	Phase Phase
	// Stats: Selected rows, Kept examples, Empty, Malformed, TooLong
	// (phase 3, needs a tokenizer), Truncated (phases 1-2, needs a
	// tokenizer), and the first malformed-row messages.
	Stats Stats
	// Lengths are token-length distributions before truncation: "sequence"
	// (phase 1), "chosen" and "rejected" (phase 2), "prompt" (phase 3).
	Lengths []Lengths
	// Examples are the first kept examples in phase order.
	Examples []InspectExample
}

// Lengths summarises token lengths.
type Lengths struct {
	Name                string
	N                   int
	Mean                float64
	Min, P50, P90, P99  int
	Max                 int
	OverLimit, LimitLen int // how many exceed LimitLen (MaxSeqLen or MaxPromptLen)
}

// InspectExample is one example as text and, with a tokenizer, as built.
type InspectExample struct {
	Row    int64 // row in the raw split
	Sample Sample
	// Example is the built example (zero without a tokenizer).
	Example Example
}

// percentile returns the nearest-rank p-th percentile of sorted v.
func percentile(v []int, p float64) int {
	if len(v) == 0 {
		return 0
	}
	i := int(p/100*float64(len(v))+0.999999999) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func summarize(name string, v []int, limit int) Lengths {
	l := Lengths{Name: name, N: len(v), LimitLen: limit}
	if len(v) == 0 {
		return l
	}
	sort.Ints(v)
	sum := 0
	for _, x := range v {
		sum += x
		if x > limit {
			l.OverLimit++
		}
	}
	l.Mean = float64(sum) / float64(len(v))
	l.Min, l.Max = v[0], v[len(v)-1]
	l.P50, l.P90, l.P99 = percentile(v, 50), percentile(v, 90), percentile(v, 99)
	return l
}

// Inspect reads every row of a dataset's train and eval parts once (with
// malformed rows counted, not fatal) and reports what each phase would get.
func Inspect(ds *Dataset, o InspectOptions) (*Report, error) {
	if o.Split == nil {
		o.Split = Split{2, 4, 4}
	}
	if len(o.Split) != 3 {
		return nil, fmt.Errorf("data: split %s has %d parts, want 3", o.Split, len(o.Split))
	}
	if o.Examples == 0 {
		o.Examples = 3
	}
	if o.Tokenizer != nil && (o.MaxSeqLen < 1 || o.MaxPromptLen < 1) {
		return nil, fmt.Errorf("data: max lengths %d/%d, want >= 1", o.MaxSeqLen, o.MaxPromptLen)
	}
	bo := Options{Split: o.Split, Seed: o.Seed, MaxSeqLen: o.MaxSeqLen, MaxPromptLen: o.MaxPromptLen,
		AddEOS: o.AddEOS, EndText: o.EndText, EOS: o.EOS, Tokenizer: o.Tokenizer, Chat: o.Chat}
	if o.Chat != nil {
		if o.Tokenizer == nil {
			return nil, fmt.Errorf("data: a chat template needs a tokenizer")
		}
		if err := bo.check(PhasePPO); err != nil {
			return nil, err
		}
	}
	rep := &Report{Dataset: ds.Name, Adapter: ds.Adapter, Root: ds.Root, Ignored: ds.Ignored, Tokenized: o.Tokenizer != nil, Chat: o.Chat != nil}
	for _, part := range []Part{Train, Eval} {
		pr, err := inspectPart(ds, part, &o, &bo)
		if err != nil {
			return nil, err
		}
		rep.Parts = append(rep.Parts, pr)
	}
	return rep, nil
}

type inspectJob struct {
	job
	phase int8
}

func inspectPart(ds *Dataset, part Part, o *InspectOptions, bo *Options) (PartReport, error) {
	a := ds.Adapter
	split, files, ok := ds.PartFiles(part)
	pr := PartReport{Part: part, Split: split, Files: files, Missing: !ok}
	for k := range pr.Phases {
		p := Phase(k + 1)
		pr.Phases[k] = PhaseReport{Phase: p, Stats: Stats{Dataset: ds.Name, Part: part.String(), Phase: int(p)}}
	}
	if !ok {
		return pr, nil
	}
	schema, err := ReadSchema(files[0])
	if err != nil {
		return pr, err
	}
	pr.Schema = schema
	rows, err := partRows(files)
	if err != nil {
		return pr, err
	}
	asg, err := assign(rows, a.EvalFromTrain, part, o.Split, o.Seed)
	if err != nil {
		return pr, err
	}
	pr.Rows = int64(asg.n[0] + asg.n[1] + asg.n[2])
	var lengths [3][2][]int
	phaseOK := [3]bool{}
	for k := range pr.Phases {
		pr.Phases[k].Stats.Rows = pr.Rows
		pr.Phases[k].Stats.Selected = int64(asg.n[k])
		ok := true
		for _, r := range []Role{RolePrompt, RoleChosen, RoleRejected} {
			if Phase(k+1).roles()&r != 0 && !a.HasRole(r) {
				ok = false
			}
		}
		phaseOK[k] = ok
	}
	// keep records an example if it is among the first o.Examples by position.
	firstPos := [3][]int32{}
	keep := func(k int8, pos int32, ex InspectExample) {
		ph := &pr.Phases[k]
		i := sort.Search(len(firstPos[k]), func(i int) bool { return firstPos[k][i] > pos })
		if i >= o.Examples {
			return
		}
		firstPos[k] = append(firstPos[k][:i], append([]int32{pos}, firstPos[k][i:]...)...)
		ph.Examples = append(ph.Examples[:i], append([]InspectExample{ex}, ph.Examples[i:]...)...)
		if len(ph.Examples) > o.Examples {
			ph.Examples, firstPos[k] = ph.Examples[:o.Examples], firstPos[k][:o.Examples]
		}
	}
	var pending []inspectJob
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		var texts []string
		at := make([]int, len(pending)+1)
		units := make([]unit, len(pending))
		ok := make([]bool, len(pending))
		for i := range pending {
			at[i] = len(texts)
			u, err := prepare(Phase(pending[i].phase+1), &pending[i].s, bo)
			if err != nil {
				pr.Phases[pending[i].phase].Stats.unrendered(fmt.Errorf("row %d: %w", pending[i].row+1, err))
				continue
			}
			units[i], ok[i] = u, true
			texts = append(texts, u.texts...)
		}
		at[len(pending)] = len(texts)
		enc, err := encodeFor(bo, texts)
		if err != nil {
			return err
		}
		for i, j := range pending {
			if !ok[i] {
				continue
			}
			p := Phase(j.phase + 1)
			e := enc[at[i]:at[i+1]]
			st := &pr.Phases[j.phase].Stats
			switch p {
			case PhaseSFT:
				l := len(e[0])
				if o.AddEOS {
					l++
				}
				lengths[0][0] = append(lengths[0][0], l)
			case PhaseReward:
				lengths[1][0] = append(lengths[1][0], len(e[0]))
				lengths[1][1] = append(lengths[1][1], len(e[1]))
			default:
				lengths[2][0] = append(lengths[2][0], len(e[0]))
			}
			ex, kept, tr := buildExample(p, &units[i], e, bo)
			if !kept {
				st.TooLong++
				continue
			}
			st.Kept++
			if tr {
				st.Truncated++
			}
			if units[i].lastOnly {
				st.LastTurnOnly++
			}
			ex.Row = j.row
			keep(j.phase, j.pos, InspectExample{Row: j.row, Sample: j.s, Example: ex})
		}
		pending = pending[:0]
		return nil
	}
	err = scanFiles(files, a.Columns, func(g int64, cells []Cell, bad error) error {
		k := asg.phase[g]
		if k < 0 {
			return nil
		}
		st := &pr.Phases[k].Stats
		if bad != nil {
			st.Malformed++
			if len(st.Errors) < maxErrors {
				st.Errors = append(st.Errors, bad.Error())
			}
			return nil
		}
		if !phaseOK[k] {
			return nil
		}
		if _, ok := a.needs(cells, Phase(k+1)); !ok {
			st.Empty++
			return nil
		}
		s, err := a.Convert(cells)
		if err != nil {
			st.Malformed++
			if len(st.Errors) < maxErrors {
				st.Errors = append(st.Errors, fmt.Sprintf("row %d: %v", g+1, err))
			}
			return nil
		}
		if o.Tokenizer == nil {
			st.Kept++
			keep(k, asg.pos[g], InspectExample{Row: g, Sample: s})
			return nil
		}
		pending = append(pending, inspectJob{job{pos: asg.pos[g], row: g, s: s}, k})
		if len(pending) == encodeChunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return pr, err
	}
	if o.Tokenizer != nil {
		pr.Phases[0].Lengths = []Lengths{summarize("sequence", lengths[0][0], o.MaxSeqLen)}
		pr.Phases[1].Lengths = []Lengths{summarize("chosen", lengths[1][0], o.MaxSeqLen), summarize("rejected", lengths[1][1], o.MaxSeqLen)}
		pr.Phases[2].Lengths = []Lengths{summarize("prompt", lengths[2][0], o.MaxPromptLen)}
	}
	return pr, nil
}
