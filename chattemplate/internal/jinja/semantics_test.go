package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goldenNow is the clock scripts/chat_template_golden.py fixes strftime_now to.
var goldenNow = time.Date(2024, 7, 6, 9, 5, 3, 0, time.Local)

type semanticsCase struct {
	Template  string          `json:"template"`
	Vars      json.RawMessage `json:"vars"`
	Text      *string         `json:"text"`
	Error     string          `json:"error"`
	ErrorType string          `json:"error_type"`
}

// TestSemantics renders the small templates of testdata/semantics.json (one
// Jinja feature each, rendered by Python's jinja2 as transformers sets it up)
// and compares byte for byte; where jinja2 raised, an error is expected, with
// the same message for raise_exception and undefined values.
func TestSemantics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "semantics.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []semanticsCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Cases) < 50 {
		t.Fatalf("only %d cases in semantics.json", len(golden.Cases))
	}
	for i, c := range golden.Cases {
		vars, err := FromJSON(c.Vars)
		if err != nil {
			t.Fatalf("case %d: vars: %v", i, err)
		}
		m := map[string]Value{}
		d := vars.(*Dict)
		for j, k := range d.Keys() {
			m[k.(string)] = d.vals[j]
		}
		got, err := render(c.Template, m)
		switch {
		case c.Text != nil && err != nil:
			t.Errorf("case %d %q: unexpected error %v\nwant %q", i, c.Template, err, *c.Text)
		case c.Text != nil && got != *c.Text:
			t.Errorf("case %d %q:\n got %q\nwant %q", i, c.Template, got, *c.Text)
		case c.Text == nil && err == nil:
			t.Errorf("case %d %q: rendered %q, want %s %q", i, c.Template, got, c.ErrorType, c.Error)
		case c.Text == nil:
			checkError(t, i, c, err)
		}
	}
}

func checkError(t *testing.T, i int, c semanticsCase, err error) {
	t.Helper()
	var te *TemplateError
	var ue *UndefinedError
	var se *SyntaxError
	var sec *SecurityError
	switch c.ErrorType {
	case "TemplateError":
		if !errors.As(err, &te) || te.Msg != c.Error {
			t.Errorf("case %d %q: error %v, want TemplateError %q", i, c.Template, err, c.Error)
		}
	case "UndefinedError":
		if !errors.As(err, &ue) || ue.Msg != c.Error {
			t.Errorf("case %d %q: error %v, want UndefinedError %q", i, c.Template, err, c.Error)
		}
	case "TemplateSyntaxError":
		if !errors.As(err, &se) || !strings.Contains(se.Msg, strings.SplitN(c.Error, ".", 2)[0]) {
			t.Errorf("case %d %q: error %v, want a syntax error like %q", i, c.Template, err, c.Error)
		}
	case "SecurityError":
		if !errors.As(err, &sec) || sec.Msg != c.Error {
			t.Errorf("case %d %q: error %v, want SecurityError %q", i, c.Template, err, c.Error)
		}
	}
}

func render(src string, vars map[string]Value) (string, error) {
	tm, err := Parse(src)
	if err != nil {
		return "", err
	}
	out, _, err := tm.Render(vars, Env{Now: func() time.Time { return goldenNow }})
	return out, err
}
