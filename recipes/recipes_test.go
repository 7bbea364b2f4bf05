package recipes

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestBuiltinsParse(t *testing.T) {
	if len(Names()) == 0 {
		t.Fatal("no built-in recipes")
	}
	for _, n := range Names() {
		r, err := Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if r.Description == "" || r.Actor == "" {
			t.Errorf("%s: description and actor are required", n)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"descripton: typo\n", "descripton"},
		{"steps:\n  sfft: {}\n", `unknown step "sfft"`},
		{"steps:\n  sft: {learning-rate: {a: 1}}\n", "steps.sft.learning-rate"},
		{"", "empty"},
		{"actor: [1, 2\n", "recipe x.yaml"},
	} {
		_, err := Parse([]byte(c.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
	if _, err := Load("no-such-recipe"); err == nil || !strings.Contains(err.Error(), "unknown recipe") {
		t.Errorf("unknown recipe: %v", err)
	}
}

func TestApplyCommandLineWins(t *testing.T) {
	r, err := Parse([]byte("actor: a\nsteps:\n  sft: {learning-rate: 0.5, data: [x, y], max-seq-len: 64}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("sft", pflag.ContinueOnError)
	lr := fs.Float64("learning-rate", 1, "")
	data := fs.StringSlice("data", nil, "")
	seq := fs.Int("max-seq-len", 512, "")
	if err := fs.Parse([]string{"--max-seq-len", "128"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply("sft", fs, func(n string) bool { return fs.Lookup(n) != nil }); err != nil {
		t.Fatal(err)
	}
	if *lr != 0.5 || strings.Join(*data, "|") != "x|y" || *seq != 128 {
		t.Errorf("lr %v data %v seq %v", *lr, *data, *seq)
	}
	bad, _ := Parse([]byte("actor: a\nsteps:\n  sft: {learning-rat: 1}\n"), "t.yaml")
	if _, err := bad.Apply("sft", fs, func(n string) bool { return fs.Lookup(n) != nil }); err == nil || !strings.Contains(err.Error(), "learning-rat") {
		t.Errorf("typo in a flag name: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range Names() {
		b, _ := builtin.ReadFile(n + ".yaml")
		f.Add(b)
	}
	f.Add([]byte("steps: {sft: {a: [1, [2]]}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b, "fuzz.yaml")
	})
}
