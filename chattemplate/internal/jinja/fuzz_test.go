package jinja

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzTemplate parses and renders arbitrary template text: it must give a
// result or an error, never panic. Seeds: the templates of semantics.json.
func FuzzTemplate(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "semantics.json"))
	if err != nil {
		f.Fatal(err)
	}
	var golden struct {
		Cases []semanticsCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		f.Fatal(err)
	}
	for _, c := range golden.Cases {
		f.Add(c.Template)
	}
	msgs, _ := FromJSON([]byte(`[{"role": "system", "content": "s"}, {"role": "user", "content": "u <think>x</think>"}, {"role": "assistant", "content": "a"}]`))
	f.Fuzz(func(t *testing.T, src string) {
		tm, err := Parse(src)
		if err != nil {
			return
		}
		_, _, _ = tm.Render(map[string]Value{"messages": msgs, "add_generation_prompt": true, "bos_token": "<s>", "l": NewList(1, "a", None)}, Env{})
	})
}
