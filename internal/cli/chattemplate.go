package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/chattemplate"
)

// ChatTemplateOptions are the options of `gochat chat-template`.
type ChatTemplateOptions struct {
	g         *Globals
	Tokenizer string
}

func newChatTemplateCmd(g *Globals, runF func(*ChatTemplateOptions) error) *cobra.Command {
	opts := &ChatTemplateOptions{g: g}
	cmd := &cobra.Command{
		Use:   "chat-template --tokenizer DIR",
		Short: "Render conversations with a model's chat template, as transformers' apply_chat_template does",
		Long: `Render conversations with the chat template of a Hugging Face model directory
(chat_template.jinja, or tokenizer_config.json's chat_template) exactly as
transformers' apply_chat_template(messages, tokenize=False,
add_generation_prompt=...) renders them: the way to see what a model is fed.

It reads JSON lines from stdin:

  {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}

with optional "tools" (a list of tool schemas) and "kwargs" (more template
variables, e.g. {"enable_thinking": false}), and writes one line per input
line: {"text": "..."}, or {"error": "..."} when the template raised (the
message of its raise_exception) or failed, and goes on with the next line.
A line that is not such a JSON object stops it with an error naming the line.`,
		Example: `  echo '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}' |
    gochat chat-template --tokenizer ../Qwen2.5-0.5B-Instruct`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Tokenizer == "" {
				return usageErrorf("--tokenizer is required")
			}
			if runF != nil {
				return runF(opts)
			}
			return runChatTemplate(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Tokenizer, "tokenizer", "", "Hugging Face model or tokenizer directory, or a model's Hub id")
	return cmd
}

func runChatTemplate(opts *ChatTemplateOptions) error {
	dir, err := resolveModel(opts.g, opts.Tokenizer, "")
	if err != nil {
		return err
	}
	tpl, err := chattemplate.Load(dir)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(opts.g.Out)
	err = renderChatLines(newLineReader(opts.g.In), w, tpl)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// renderChatLines renders each {"messages", "add_generation_prompt", "tools",
// "kwargs"} line of lr to a {"text"} or {"error"} line of w.
func renderChatLines(lr *lineReader, w *bufio.Writer, tpl *chattemplate.Template) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for {
		line, n, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var in struct {
			Messages            json.RawMessage            `json:"messages"`
			AddGenerationPrompt bool                       `json:"add_generation_prompt"`
			Tools               json.RawMessage            `json:"tools"`
			Kwargs              map[string]json.RawMessage `json:"kwargs"`
		}
		if err := parseLine(line, n, &in); err != nil {
			return err
		}
		if in.Messages == nil {
			return fmt.Errorf(`stdin line %d: no "messages" field, want {"messages": [...], "add_generation_prompt": ...}`, n)
		}
		o := chattemplate.Options{AddGenerationPrompt: in.AddGenerationPrompt}
		if in.Tools != nil && string(in.Tools) != "null" {
			o.Tools = in.Tools
		}
		if len(in.Kwargs) > 0 {
			o.Vars = map[string]any{}
			for k, v := range in.Kwargs {
				o.Vars[k] = v
			}
		}
		var out any
		text, err := tpl.RenderJSON(in.Messages, o)
		var raised *chattemplate.TemplateError
		switch {
		case errors.As(err, &raised):
			out = struct {
				Error string `json:"error"`
			}{raised.Msg}
		case err != nil:
			out = struct {
				Error string `json:"error"`
			}{err.Error()}
		default:
			out = struct {
				Text string `json:"text"`
			}{text}
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
}
