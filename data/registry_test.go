package data

import (
	"reflect"
	"testing"
)

func sc(s string) Cell  { return Cell{Str: s} }
func nc(v float64) Cell { return Cell{Num: v} }
func nullCell() Cell    { return Cell{Null: true} }
func mustLookup(t *testing.T, name string) *Adapter {
	t.Helper()
	a, ok := Lookup(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return a
}

// The expectations follow DeepSpeed-Chat's raw_datasets.py, class by class.
func TestAdapters(t *testing.T) {
	for _, c := range []struct {
		name  string
		cells []Cell
		want  Sample
	}{
		{"Dahoas/rm-static",
			[]Cell{sc("\n\nHuman: hi\n\nAssistant:"), sc(" hello"), sc(" go away")},
			Sample{"\n\nHuman: hi\n\nAssistant:", " hello", " go away", "\n\nHuman: hi\n\nAssistant: hello", "\n\nHuman: hi\n\nAssistant: go away"}},
		{"Dahoas/full-hh-rlhf",
			[]Cell{sc("\n\nHuman: q\n\nAssistant:"), sc(" a"), sc(" b")},
			Sample{"\n\nHuman: q\n\nAssistant:", " a", " b", "\n\nHuman: q\n\nAssistant: a", "\n\nHuman: q\n\nAssistant: b"}},
		{"Dahoas/synthetic-instruct-gptj-pairwise",
			[]Cell{sc("How do I bake?"), sc("Use an oven."), sc("No.")},
			Sample{" Human: How do I bake? Assistant:", " Use an oven.", " No.", " Human: How do I bake? Assistant: Use an oven.", " Human: How do I bake? Assistant: No."}},
		{"yitingxie/rlhf-reward-datasets",
			[]Cell{sc("\n\nHuman: q\n\n"), sc("Assistant: x Assistant: good"), sc("Assistant: bad")},
			Sample{"\n\nHuman: q\n\nAssistant:", " good", " bad", "\n\nHuman: q\n\nAssistant: x Assistant: good", "\n\nHuman: q\n\nAssistant: bad"}},
		{"openai/webgpt_comparisons", // score_0 > score_1: answer_0 chosen; citations stripped
			[]Cell{sc("Why is the sky blue?"), sc("Rayleigh scattering [1] (see [2]) works."), sc("Magic[3]."), nc(1), nc(-1)},
			// Python's re gives "Rayleigh scattering) works." too: " (see [2]" is one match.
			Sample{" Human: Why is the sky blue? Assistant:", " Rayleigh scattering) works.", " Magic.", " Human: Why is the sky blue? Assistant: Rayleigh scattering) works.", " Human: Why is the sky blue? Assistant: Magic."}},
		{"openai/webgpt_comparisons", // tie: answer_0 chosen
			[]Cell{sc("q"), sc("a0"), sc("a1"), nc(0), nc(0)},
			Sample{" Human: q Assistant:", " a0", " a1", " Human: q Assistant: a0", " Human: q Assistant: a1"}},
		{"openai/webgpt_comparisons", // score_1 higher: answer_1 chosen
			[]Cell{sc("q"), sc("a0"), sc("a1"), nc(-0.5), nc(0.5)},
			Sample{" Human: q Assistant:", " a1", " a0", " Human: q Assistant: a1", " Human: q Assistant: a0"}},
		{"stanfordnlp/SHP", // labels 1: A preferred
			[]Cell{sc("Is it?"), sc("Yes."), sc("No."), nc(1)},
			Sample{" Human: Is it? Assistant:", " Yes.", " No.", " Human: Is it? Assistant: Yes.", " Human: Is it? Assistant: No."}},
		{"stanfordnlp/SHP", // labels 0: B preferred
			[]Cell{sc("Is it?"), sc("Yes."), sc("No."), nc(0)},
			Sample{" Human: Is it? Assistant:", " No.", " Yes.", " Human: Is it? Assistant: No.", " Human: Is it? Assistant: Yes."}},
		{"local/jsonfile",
			[]Cell{sc("Human: q Assistant:"), sc("a"), sc("b")},
			Sample{" Human: q Assistant:", " a", " b", " Human: q Assistant: a", " Human: q Assistant: b"}},
	} {
		got, err := mustLookup(t, c.name).Convert(c.cells)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, got, c.want)
		}
	}
}

// The expectations were checked with Python's re.sub, applying DeepSpeed-Chat's
// two patterns in order.
func TestStripCitations(t *testing.T) {
	for in, want := range map[string]string{
		"Rayleigh scattering [1] (see [2]) works.": "Rayleigh scattering) works.",
		"A [1] B":                  "A B",
		"A[1][2] B":                "A B",
		"A (Wikipedia) B":          "A B",
		"A [1, 2] and (x] y":       "A and y",
		"no citations":             "no citations",
		"multi\nline [1\n] kept":   "multi\nline [1\n] kept", // '.' does not cross lines, as in Python
		"two [1] spaces [2]":       "two spaces",
		"unicode ‘quoted’ [12] é.": "unicode ‘quoted’ é.",
	} {
		if got := stripCitations(in); got != want {
			t.Errorf("stripCitations(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAdapterSplits(t *testing.T) {
	for _, c := range []struct {
		name, train, eval string
		fromTrain         bool
	}{
		{"Dahoas/rm-static", "train", "test", false},
		{"Dahoas/full-hh-rlhf", "train", "test", false},
		{"Dahoas/synthetic-instruct-gptj-pairwise", "train", "train", true},
		{"yitingxie/rlhf-reward-datasets", "train", "test", false},
		{"openai/webgpt_comparisons", "train", "train", true},
		{"stanfordnlp/SHP", "train", "validation", false},
		{"local/jsonfile", "train", "eval", false},
	} {
		a := mustLookup(t, c.name)
		if a.TrainSplit != c.train || a.EvalSplit != c.eval || a.EvalFromTrain != c.fromTrain {
			t.Errorf("%s: splits %s/%s fromTrain %v", c.name, a.TrainSplit, a.EvalSplit, a.EvalFromTrain)
		}
	}
	if n := len(Names()); n != 7 {
		t.Errorf("%d registered names", n)
	}
	if _, ok := Lookup("nosuch/dataset"); ok {
		t.Error("Lookup found an unknown name")
	}
}

func TestMatchAdapter(t *testing.T) {
	for in, want := range map[string]string{
		"Dahoas/rm-static":                 "Dahoas/rm-static",
		"/data/Dahoas/rm-static":           "Dahoas/rm-static",
		"/hub/datasets--stanfordnlp--SHP/": "stanfordnlp/SHP",
		"./my-data.jsonl":                  "",
	} {
		a, ok := match(in)
		if got := ""; ok {
			got = a.Name
			if got != want {
				t.Errorf("match(%q) = %s, want %s", in, got, want)
			}
		} else if want != "" {
			t.Errorf("match(%q) found nothing, want %s", in, want)
		}
	}
}

func TestNullsDropByPhase(t *testing.T) {
	a := mustLookup(t, "local/jsonfile")
	cells := []Cell{sc("p"), sc("c"), nullCell()} // rejected is null
	for _, c := range []struct {
		p  Phase
		ok bool
	}{{PhaseSFT, true}, {PhaseReward, false}, {PhasePPO, true}} {
		if col, ok := a.needs(cells, c.p); ok != c.ok {
			t.Errorf("phase %d: ok %v (column %q), want %v", c.p, ok, col, c.ok)
		}
	}
}

func TestGeneric(t *testing.T) {
	a, err := Generic(ColumnMap{Prompt: "q", Chosen: "good"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Columns) != 2 || a.HasRole(RoleRejected) {
		t.Fatalf("columns %+v", a.Columns)
	}
	s, err := a.Convert([]Cell{sc("P"), sc(" C")})
	if err != nil || s != (Sample{Prompt: "P", Chosen: " C", PromptChosen: "P C", PromptRejected: "P"}) {
		t.Errorf("Convert = %+v, %v", s, err)
	}
	if _, err := Generic(ColumnMap{Prompt: "x", Chosen: "x"}); err == nil {
		t.Error("a column mapped twice is accepted")
	}
	if _, err := Generic(ColumnMap{}); err == nil {
		t.Error("an empty prompt column is accepted")
	}
	if _, err := a.Convert([]Cell{sc("P")}); err == nil {
		t.Error("Convert with too few cells succeeded")
	}
	want := []Column{{"q", String, RolePrompt}, {"good", String, RoleChosen}}
	if !reflect.DeepEqual(a.Columns, want) {
		t.Errorf("columns %+v", a.Columns)
	}
}
