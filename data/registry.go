package data

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// Kind is the type a column's cells must have.
type Kind int

// Column kinds.
const (
	String Kind = iota // UTF-8 text (Arrow utf8/large_utf8, a JSON string)
	Number             // any integer or floating-point type, a JSON number
)

func (k Kind) String() string {
	if k == Number {
		return "number"
	}
	return "string"
}

// Role says which parts of a Sample a column feeds. A null cell drops the
// row from the phases that need that part: phase 1 needs the prompt and the
// chosen response, phase 2 all three, phase 3 only the prompt.
type Role uint8

// Roles; a column may feed several parts.
const (
	RolePrompt Role = 1 << iota
	RoleChosen
	RoleRejected
)

// Column is one raw column an adapter reads.
type Column struct {
	// Name is the column name; a dotted path ("question.full_text") names a
	// field inside a struct column (Parquet) or a nested object (JSON).
	Name string
	Kind Kind
	Role Role
}

// Sample is one preference row in DeepSpeed-Chat's canonical form. Prompt is
// "\n\nHuman: ...\n\nAssistant:" or " Human: ... Assistant:"; responses start
// with a space. PromptChosen and PromptRejected are the full texts of phases 1
// and 2 (DeepSpeed-Chat's get_prompt_and_chosen / get_prompt_and_rejected);
// they equal Prompt+Chosen and Prompt+Rejected for every adapter except
// yitingxie/rlhf-reward-datasets, where they are the raw prompt+response.
type Sample struct {
	Prompt, Chosen, Rejected     string
	PromptChosen, PromptRejected string
}

// Adapter maps the raw rows of one dataset layout to Samples.
type Adapter struct {
	// Name is the DeepSpeed-Chat dataset name ("Dahoas/rm-static"), or
	// "generic" for a column mapping.
	Name string
	// Columns are the raw columns read, in the order convert sees them.
	Columns []Column
	// TrainSplit and EvalSplit name the raw splits used for training and
	// evaluation ("train", "test", "validation", "eval").
	TrainSplit, EvalSplit string
	// EvalFromTrain makes train and eval the 9:1 slices of a seeded
	// permutation of the raw train split (datasets that ship only train).
	EvalFromTrain bool
	// Files are fixed data files relative to the dataset root (local/jsonfile),
	// split name -> path; nil means the files are discovered.
	Files map[string]string
	// convert builds a sample from one row's cells (in Columns order); cells
	// of a part the phase does not need may be null.
	convert func(c []Cell) (Sample, error)
}

// Cell is one value read from a file: a string or a number, or null.
type Cell struct {
	Str  string
	Num  float64
	Null bool
}

// Convert applies the adapter to one row's cells, given in Columns order.
func (a *Adapter) Convert(cells []Cell) (Sample, error) {
	if len(cells) != len(a.Columns) {
		return Sample{}, fmt.Errorf("adapter %s: %d cells for %d columns", a.Name, len(cells), len(a.Columns))
	}
	return a.convert(cells)
}

// needs reports whether a row with the given null cells can serve a phase;
// it returns the name of the first null column the phase needs.
func (a *Adapter) needs(cells []Cell, phase Phase) (string, bool) {
	want := phase.roles()
	for i, col := range a.Columns {
		if cells[i].Null && col.Role&want != 0 {
			return col.Name, false
		}
	}
	return "", true
}

// HasRole reports whether some column feeds role r.
func (a *Adapter) HasRole(r Role) bool {
	for _, c := range a.Columns {
		if c.Role&r != 0 {
			return true
		}
	}
	return false
}

// Citation patterns removed from openai/webgpt_comparisons answers, applied
// in this order (DeepSpeed-Chat removes " [1]" first, then "[1]" and "(...)").
// Compiled regexps are safe for concurrent use and never modified.
var (
	citeSpaced = regexp.MustCompile(` [\(\[].*?[\)\]]`)
	citeBare   = regexp.MustCompile(`[\(\[].*?[\)\]]`)
)

func stripCitations(s string) string {
	return citeBare.ReplaceAllLiteralString(citeSpaced.ReplaceAllLiteralString(s, ""), "")
}

// afterLast returns the text after the last sep, or s when sep is absent
// (Python's s.split(sep)[-1]).
func afterLast(s, sep string) string {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[i+len(sep):]
	}
	return s
}

// pcr returns three string columns feeding the prompt, chosen and rejected
// parts.
func pcr(prompt, chosen, rejected string) []Column {
	return []Column{{prompt, String, RolePrompt}, {chosen, String, RoleChosen}, {rejected, String, RoleRejected}}
}

// builtin returns the DeepSpeed-Chat adapters, freshly built (no shared
// mutable state).
func builtin() []*Adapter {
	hh := func(name string) *Adapter {
		return &Adapter{
			Name: name, Columns: pcr("prompt", "chosen", "rejected"),
			TrainSplit: "train", EvalSplit: "test",
			convert: func(c []Cell) (Sample, error) {
				p, ch, rj := c[0].Str, c[1].Str, c[2].Str
				return Sample{p, ch, rj, p + ch, p + rj}, nil
			},
		}
	}
	human := func(q string) string { return " Human: " + q + " Assistant:" }
	return []*Adapter{
		hh("Dahoas/rm-static"),
		hh("Dahoas/full-hh-rlhf"),
		{
			Name: "Dahoas/synthetic-instruct-gptj-pairwise", Columns: pcr("prompt", "chosen", "rejected"),
			TrainSplit: "train", EvalSplit: "train", EvalFromTrain: true,
			convert: func(c []Cell) (Sample, error) {
				p := human(c[0].Str)
				ch, rj := " "+c[1].Str, " "+c[2].Str
				return Sample{p, ch, rj, p + ch, p + rj}, nil
			},
		},
		{
			Name: "yitingxie/rlhf-reward-datasets", Columns: pcr("prompt", "chosen", "rejected"),
			TrainSplit: "train", EvalSplit: "test",
			convert: func(c []Cell) (Sample, error) {
				p, ch, rj := c[0].Str, c[1].Str, c[2].Str
				return Sample{
					Prompt: p + "Assistant:", Chosen: afterLast(ch, "Assistant:"), Rejected: afterLast(rj, "Assistant:"),
					PromptChosen: p + ch, PromptRejected: p + rj,
				}, nil
			},
		},
		{
			Name: "openai/webgpt_comparisons",
			Columns: []Column{
				{"question.full_text", String, RolePrompt},
				{"answer_0", String, RoleChosen | RoleRejected},
				{"answer_1", String, RoleChosen | RoleRejected},
				{"score_0", Number, RoleChosen | RoleRejected},
				{"score_1", Number, RoleChosen | RoleRejected},
			},
			TrainSplit: "train", EvalSplit: "train", EvalFromTrain: true,
			convert: func(c []Cell) (Sample, error) {
				p := human(c[0].Str)
				a0, a1 := c[1].Str, c[2].Str
				// Ties go to answer_0 (score_0 >= score_1 picks it as chosen).
				ch, rj := a1, a0
				if c[3].Num >= c[4].Num {
					ch, rj = a0, a1
				}
				ch, rj = " "+stripCitations(ch), " "+stripCitations(rj)
				return Sample{p, ch, rj, p + ch, p + rj}, nil
			},
		},
		{
			Name: "stanfordnlp/SHP",
			Columns: []Column{
				{"history", String, RolePrompt},
				{"human_ref_A", String, RoleChosen | RoleRejected},
				{"human_ref_B", String, RoleChosen | RoleRejected},
				{"labels", Number, RoleChosen | RoleRejected},
			},
			TrainSplit: "train", EvalSplit: "validation",
			convert: func(c []Cell) (Sample, error) {
				p := human(c[0].Str)
				if math.IsNaN(c[3].Num) || math.IsInf(c[3].Num, 0) {
					return Sample{}, fmt.Errorf("labels %v is not an integer", c[3].Num)
				}
				ch, rj := c[2].Str, c[1].Str
				if math.Trunc(c[3].Num) == 1 { // Python int(labels) == 1
					ch, rj = c[1].Str, c[2].Str
				}
				ch, rj = " "+ch, " "+rj
				return Sample{p, ch, rj, p + ch, p + rj}, nil
			},
		},
		{
			Name: "local/jsonfile", Columns: pcr("prompt", "chosen", "rejected"),
			TrainSplit: "train", EvalSplit: "eval",
			Files: map[string]string{"train": "data/train.json", "eval": "data/eval.json"},
			convert: func(c []Cell) (Sample, error) {
				p, ch, rj := " "+c[0].Str, " "+c[1].Str, " "+c[2].Str
				return Sample{p, ch, rj, p + ch, p + rj}, nil
			},
		},
	}
}

// Lookup returns the adapter registered under a DeepSpeed-Chat dataset name.
func Lookup(name string) (*Adapter, bool) {
	for _, a := range builtin() {
		if a.Name == name {
			return a, true
		}
	}
	return nil, false
}

// Names lists the registered dataset names, sorted.
func Names() []string {
	var names []string
	for _, a := range builtin() {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	return names
}

// match finds the adapter whose name occurs in s, the way DeepSpeed-Chat's
// get_raw_dataset picks a class by substring ("/data/Dahoas/rm-static"
// selects Dahoas/rm-static). A hub cache folder name ("datasets--Dahoas--rm-static")
// matches too.
func match(s string) (*Adapter, bool) {
	for _, a := range builtin() {
		hub := "datasets--" + strings.ReplaceAll(a.Name, "/", "--")
		if strings.Contains(s, a.Name) || strings.Contains(s, hub) {
			return a, true
		}
	}
	return nil, false
}

// ColumnMap names the columns of a generic preference file.
type ColumnMap struct {
	Prompt, Chosen, Rejected string
}

// Generic returns an adapter for files whose columns already hold canonical
// strings (as rm-static's do): PromptChosen = Prompt + Chosen. An empty
// Chosen or Rejected name leaves that part out; such a dataset serves only
// the phases that do not need it (phase 3 needs only the prompt).
func Generic(m ColumnMap) (*Adapter, error) {
	if m.Prompt == "" {
		return nil, fmt.Errorf("generic dataset: the prompt column name is empty")
	}
	cols := []Column{{m.Prompt, String, RolePrompt}}
	ci, ri := -1, -1
	if m.Chosen != "" {
		ci = len(cols)
		cols = append(cols, Column{m.Chosen, String, RoleChosen})
	}
	if m.Rejected != "" {
		ri = len(cols)
		cols = append(cols, Column{m.Rejected, String, RoleRejected})
	}
	seen := map[string]bool{}
	for _, c := range cols {
		if seen[c.Name] {
			return nil, fmt.Errorf("generic dataset: column %q is mapped twice", c.Name)
		}
		seen[c.Name] = true
	}
	return &Adapter{
		Name: "generic", Columns: cols, TrainSplit: "train", EvalSplit: "test",
		convert: func(c []Cell) (Sample, error) {
			s := Sample{Prompt: c[0].Str}
			if ci >= 0 {
				s.Chosen = c[ci].Str
			}
			if ri >= 0 {
				s.Rejected = c[ri].Str
			}
			s.PromptChosen, s.PromptRejected = s.Prompt+s.Chosen, s.Prompt+s.Rejected
			return s, nil
		},
	}, nil
}

// textAdapter reads one text column for unsupervised (pre-training style)
// data; the text goes to Sample.Prompt.
func textAdapter(column string) *Adapter {
	return &Adapter{
		Name: "text", Columns: []Column{{column, String, RolePrompt}}, TrainSplit: "train", EvalSplit: "test",
		convert: func(c []Cell) (Sample, error) { return Sample{Prompt: c[0].Str}, nil },
	}
}
