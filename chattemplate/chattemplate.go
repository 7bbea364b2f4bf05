// Package chattemplate renders a Hugging Face model's chat template exactly as
// transformers' tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) renders it.
//
// # What transformers does, and this package with it
//
// The template is Jinja2, compiled in jinja2's ImmutableSandboxedEnvironment
// with trim_blocks=True, lstrip_blocks=True and the loopcontrols extension
// (break/continue). transformers replaces the tojson filter with
// json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)
// (insertion order, ", " and ": " separators, no HTML escaping) and adds the
// globals raise_exception(msg), which aborts the render with msg, and
// strftime_now(fmt). It renders with the variables messages, tools (None when
// no tools are given), documents (None), add_generation_prompt, the
// tokenizer's special tokens that are set (bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token as strings,
// additional_special_tokens as a list of strings) and any extra keyword
// arguments (Options.Vars, e.g. Qwen3's enable_thinking). {% generation %}
// blocks (transformers' AssistantTracker) render their body.
//
// The Jinja engine is chattemplate/internal/jinja, a Jinja2 interpreter written
// for this: Python's value semantics (str() and repr() of values, ==, in,
// slices with steps such as messages[::-1], str methods like .split and
// .startswith, dict .items/.get), jinja2's lexer rules for whitespace control,
// its scoping (a set inside a for loop does not leak out of the iteration;
// namespace() objects carry values out), Undefined (renders "", using it
// otherwise is an error), macros and the filters and tests chat templates
// use. testdata/semantics.json and testdata/golden.json, rendered by Python's
// jinja2 (scripts/chat_template_golden.py), are compared byte for byte.
//
// # Where the template comes from
//
// Load reads a model directory as transformers does: chat_template.jinja, when
// present, wins over tokenizer_config.json's "chat_template"; that field is a
// string or a list of {"name", "template"}, of which Render uses "tool_use"
// when tools are given and the model has it, else "default". The special
// tokens come from tokenizer_config.json, overridden by special_tokens_map.json;
// a token written as an AddedToken object ({"content": ...}) is its content.
// A model without a template gives ErrNoTemplate.
package chattemplate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gochat-ai/gochat/chattemplate/internal/jinja"
)

// ErrNoTemplate is returned (wrapped, naming the directory) by Load for a
// model that has no chat template.
var ErrNoTemplate = errors.New("the model has no chat template (no chat_template in tokenizer_config.json and no chat_template.jinja)")

// Errors a render can return (wrapped; use errors.As):
type (
	// TemplateError is what the template raised through raise_exception(msg); Msg is msg.
	TemplateError = jinja.TemplateError
	// UndefinedError is an undefined value used where a value is needed
	// (e.g. messages[0]['role'] with no messages), with jinja2's message.
	UndefinedError = jinja.UndefinedError
	// SyntaxError is a template that does not parse (from Load or New).
	SyntaxError = jinja.SyntaxError
)

// Message is one chat message. Content is a string; messages with other
// fields (tool_calls, reasoning_content, content as a list of parts) go
// through RenderJSON.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options are the arguments of apply_chat_template besides the messages.
type Options struct {
	// AddGenerationPrompt appends the text that starts an assistant turn.
	AddGenerationPrompt bool
	// Tools is a JSON array of tool schemas, passed as the template's tools;
	// nil means tools=None.
	Tools json.RawMessage
	// Vars are extra template variables, as apply_chat_template's **kwargs
	// (e.g. "enable_thinking": false). A value is a Go nil, bool, number,
	// string, slice or map[string]any (keys sorted), or a json.RawMessage
	// (object keys kept in order). They override the special tokens.
	Vars map[string]any
	// Name picks one of the model's named templates; "" picks "tool_use"
	// when Tools is set and the model has one, else "default".
	Name string
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
}

// Template is a model's chat template (one or several named ones) with its
// special tokens. It is safe for concurrent use.
type Template struct {
	path      string // the file the template came from, for errors
	sources   map[string]string
	templates map[string]*jinja.Template
	special   map[string]jinja.Value
	specialS  map[string]string
}

var specialNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Load reads the chat template of the model directory dir (see the package
// comment). A missing or unreadable tokenizer_config.json, bad JSON or a
// template that does not parse is an error naming the file; a model without
// a template gives an error wrapping ErrNoTemplate.
func Load(dir string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	cfg := map[string]json.RawMessage{}
	data, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
	case errors.Is(err, os.ErrNotExist):
		if _, jerr := os.Stat(jinjaPath); jerr != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
	default:
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	special := map[string]json.RawMessage{}
	for _, k := range append(specialNames, "additional_special_tokens") {
		if v, ok := cfg[k]; ok {
			special[k] = v
		}
	}
	stmPath := filepath.Join(dir, "special_tokens_map.json")
	if data, err := os.ReadFile(stmPath); err == nil {
		stm := map[string]json.RawMessage{}
		if err := json.Unmarshal(data, &stm); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", stmPath, err)
		}
		for k, v := range stm {
			special[k] = v
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	tokens, additional, err := specialTokens(special)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
	}

	sources := map[string]string{}
	path := cfgPath
	if data, err := os.ReadFile(jinjaPath); err == nil {
		sources["default"], path = string(data), jinjaPath
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	} else if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
		var one string
		var named []struct {
			Name     *string `json:"name"`
			Template *string `json:"template"`
		}
		switch {
		case json.Unmarshal(raw, &one) == nil:
			sources["default"] = one
		case json.Unmarshal(raw, &named) == nil:
			for i, n := range named {
				if n.Name == nil || n.Template == nil {
					return nil, fmt.Errorf("chattemplate: %s: chat_template[%d] needs a name and a template", cfgPath, i)
				}
				sources[*n.Name] = *n.Template
			}
		default:
			return nil, fmt.Errorf("chattemplate: %s: chat_template is neither a string nor a list of {name, template}", cfgPath)
		}
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("chattemplate: %s: %w", dir, ErrNoTemplate)
	}
	return build(path, sources, tokens, additional)
}

// specialTokens turns the special-token fields into template values: strings
// (an AddedToken object gives its content) and a list for
// additional_special_tokens; unset (null or empty) ones are left out.
func specialTokens(raw map[string]json.RawMessage) (map[string]string, []string, error) {
	content := func(r json.RawMessage) (string, error) {
		var s *string
		if err := json.Unmarshal(r, &s); err == nil {
			if s == nil {
				return "", nil
			}
			return *s, nil
		}
		var tok struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(r, &tok); err != nil {
			return "", fmt.Errorf("a special token is neither a string nor an object with a content: %s", r)
		}
		return tok.Content, nil
	}
	out := map[string]string{}
	var additional []string
	for k, r := range raw {
		if k == "additional_special_tokens" {
			var list []json.RawMessage
			if err := json.Unmarshal(r, &list); err != nil {
				return nil, nil, fmt.Errorf("additional_special_tokens: %w", err)
			}
			for _, it := range list {
				s, err := content(it)
				if err != nil {
					return nil, nil, fmt.Errorf("additional_special_tokens: %w", err)
				}
				additional = append(additional, s)
			}
			continue
		}
		isSpecial := false
		for _, n := range specialNames {
			isSpecial = isSpecial || n == k
		}
		if !isSpecial {
			continue
		}
		s, err := content(r)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k, err)
		}
		if s != "" {
			out[k] = s
		}
	}
	return out, additional, nil
}

// New makes a Template from one template text (the "default") and special
// tokens (bos_token, eos_token, ...), as for a --chat-template FILE.
func New(source string, specialTokens map[string]string) (*Template, error) {
	tokens := map[string]string{}
	for k, v := range specialTokens {
		if v != "" {
			tokens[k] = v
		}
	}
	return build("template", map[string]string{"default": source}, tokens, nil)
}

func build(path string, sources map[string]string, tokens map[string]string, additional []string) (*Template, error) {
	t := &Template{path: path, sources: sources, templates: map[string]*jinja.Template{},
		special: map[string]jinja.Value{}, specialS: map[string]string{}}
	for name, src := range sources {
		tm, err := jinja.Parse(src)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %s: template %q: %w", path, name, err)
		}
		t.templates[name] = tm
	}
	for k, v := range tokens {
		t.special[k] = v
		t.specialS[k] = v
	}
	if len(additional) > 0 {
		l := jinja.NewList()
		for _, s := range additional {
			l.Items = append(l.Items, s)
		}
		t.special["additional_special_tokens"] = l
	}
	return t, nil
}

// Names returns the names of the model's templates, sorted.
func (t *Template) Names() []string {
	names := make([]string, 0, len(t.sources))
	for n := range t.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Source returns the text of the named template ("" if there is none).
func (t *Template) Source(name string) string { return t.sources[name] }

// Path is the file the template was read from (chat_template.jinja or
// tokenizer_config.json).
func (t *Template) Path() string { return t.path }

// Digest is a sha256 over the templates' names and texts (hex): name, NUL,
// text, NUL for each, names sorted.
func (t *Template) Digest() string {
	h := sha256.New()
	for _, n := range t.Names() {
		h.Write([]byte(n + "\x00" + t.sources[n] + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SpecialToken returns a special token the template sees (e.g. "eos_token"),
// and whether it is set.
func (t *Template) SpecialToken(name string) (string, bool) {
	s, ok := t.specialS[name]
	return s, ok
}

// Render renders messages; see Options.
func (t *Template) Render(messages []Message, opts Options) (string, error) {
	out, _, err := t.render(messagesValue(messages), opts)
	return out, err
}

// RenderJSON renders messages given as a JSON array of message objects,
// which may carry any fields (tool_calls, reasoning_content, ...); object keys
// keep their order, as Python's json.loads keeps them.
func (t *Template) RenderJSON(messages json.RawMessage, opts Options) (string, error) {
	v, err := jinja.FromJSON(messages)
	if err != nil {
		return "", fmt.Errorf("chattemplate: messages: %w", err)
	}
	if _, ok := v.(*jinja.List); !ok {
		return "", fmt.Errorf("chattemplate: messages must be a JSON array")
	}
	out, _, err := t.render(v, opts)
	return out, err
}

func messagesValue(messages []Message) *jinja.List {
	l := jinja.NewList()
	for _, m := range messages {
		d := jinja.NewDict()
		d.Set("role", m.Role)
		d.Set("content", m.Content)
		l.Items = append(l.Items, d)
	}
	return l
}

func (t *Template) pick(opts Options) (string, *jinja.Template, error) {
	name := opts.Name
	if name == "" {
		name = "default"
		if opts.Tools != nil && t.templates["tool_use"] != nil {
			name = "tool_use"
		}
	}
	tm, ok := t.templates[name]
	if !ok {
		if opts.Name == "" {
			return "", nil, fmt.Errorf("chattemplate: %s: the model has several chat templates (%v) and none is named \"default\"", t.path, t.Names())
		}
		return "", nil, fmt.Errorf("chattemplate: %s: no chat template named %q (have %v)", t.path, name, t.Names())
	}
	return name, tm, nil
}

func (t *Template) render(messages jinja.Value, opts Options) (string, []jinja.Span, error) {
	name, tm, err := t.pick(opts)
	if err != nil {
		return "", nil, err
	}
	vars := map[string]jinja.Value{}
	for k, v := range t.special {
		vars[k] = v
	}
	for k, v := range opts.Vars {
		switch k {
		case "messages", "tools", "documents", "add_generation_prompt":
			return "", nil, fmt.Errorf("chattemplate: Options.Vars may not set %q", k)
		}
		jv, err := jinja.FromGo(v)
		if err != nil {
			return "", nil, fmt.Errorf("chattemplate: Options.Vars[%q]: %w", k, err)
		}
		vars[k] = jv
	}
	vars["messages"] = messages
	vars["tools"] = jinja.None
	if opts.Tools != nil {
		tools, err := jinja.FromJSON(opts.Tools)
		if err != nil {
			return "", nil, fmt.Errorf("chattemplate: tools: %w", err)
		}
		vars["tools"] = tools
	}
	vars["documents"] = jinja.None
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	out, spans, err := tm.Render(vars, jinja.Env{Now: opts.Now})
	if err != nil {
		return "", nil, fmt.Errorf("chattemplate: %s: template %q: %w", t.path, name, err)
	}
	return out, spans, nil
}
