package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/chattemplate"
)

// mistralInstructDir is a chat template of chattemplate's test data
// (Mistral-7B-Instruct-v0.1's, which raises on a system message).
var mistralInstructDir = filepath.Join("..", "..", "chattemplate", "testdata", "models", "mistral-instruct-v0.1")

func TestChatTemplateFlags(t *testing.T) {
	var got *ChatTemplateOptions
	cmd := newChatTemplateCmd(&Globals{}, func(o *ChatTemplateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--tokenizer", "d"})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.Execute(); err != nil || got.Tokenizer != "d" {
		t.Fatalf("err %v, options %+v", err, got)
	}
	for _, args := range [][]string{{"chat-template"}, {"chat-template", "--tokenizer", "d", "extra"}} {
		if _, errOut, code := run(t, args...); code != exitUsage {
			t.Errorf("%v: code %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
}

// TestChatTemplateLines renders lines through the command: each line gets
// its rendering, a line whose template raises gets {"error": its message}
// and the lines after it are still rendered; a line that is not a JSON
// request stops the command naming it.
func TestChatTemplateLines(t *testing.T) {
	stdin := strings.Join([]string{
		`{"messages": [{"role": "user", "content": "Hi <b>"}], "add_generation_prompt": true}`,
		`{"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "x"}]}`,
		`{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "add_generation_prompt": false}`,
		`{"messages": []}`,
	}, "\n") + "\n"
	out, errOut, code := runIn(t, stdin, "chat-template", "--tokenizer", mistralInstructDir)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	tpl, err := chattemplate.Load(mistralInstructDir)
	if err != nil {
		t.Fatal(err)
	}
	want3, err := tpl.Render([]chattemplate.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}, chattemplate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantLines := []map[string]string{
		{"text": "<s>[INST] Hi <b> [/INST]"},
		{"error": "Conversation roles must alternate user/assistant/user/assistant/..."},
		{"text": want3},
		{"text": "<s>"},
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(wantLines) {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), len(wantLines), out)
	}
	if !strings.Contains(lines[0], "<b>") {
		t.Errorf("line 1 %s: want HTML characters unescaped", lines[0])
	}
	for i, l := range lines {
		var got map[string]string
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if len(got) != 1 || got["text"] != wantLines[i]["text"] || got["error"] != wantLines[i]["error"] {
			t.Errorf("line %d = %v, want %v", i+1, got, wantLines[i])
		}
	}
	for _, c := range []struct{ stdin, want string }{
		{"{\"messages\": []}\n{\"add_generation_prompt\": true}\n", `stdin line 2: no "messages"`},
		{"not json\n", "stdin line 1"},
	} {
		out, errOut, code := runIn(t, c.stdin, "chat-template", "--tokenizer", mistralInstructDir)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("stdin %q: code %d, stderr %q; want an error naming %q", c.stdin, code, errOut, c.want)
		}
		if strings.HasPrefix(c.stdin, "{\"messages\": []}") && out != "{\"text\":\"<s>\"}\n" {
			t.Errorf("the lines before the bad one: %q", out)
		}
	}
	if _, errOut, code := runIn(t, "", "chat-template", "--tokenizer", filepath.Join("..", "..", "chattemplate", "testdata")); code == 0 || !strings.Contains(errOut, "tokenizer_config.json") {
		t.Errorf("a directory without a tokenizer config: code %d, stderr %q", code, errOut)
	}
}
