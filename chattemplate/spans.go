package chattemplate

import (
	"fmt"
	"strings"
)

// Span is the text of one assistant message in a rendered conversation:
// bytes [Start, End) of the text, for message Message (an index into the
// messages).
type Span struct {
	Message    int
	Start, End int
}

// SpanError says why the assistant spans of a conversation cannot be found
// by rendering prefixes: the template renders message Message (or what comes
// before it) differently depending on what follows. Qwen3's template does
// this: an assistant turn that is last gets an empty <think></think> block,
// one followed by a later user turn does not.
type SpanError struct {
	Message int
	Reason  string
}

func (e *SpanError) Error() string {
	return fmt.Sprintf("chattemplate: assistant message %d: %s", e.Message, e.Reason)
}

// AssistantSpans renders the conversation (without a generation prompt,
// whatever opts.AddGenerationPrompt says) and finds the text of each
// assistant message in it, for putting the SFT loss on assistant tokens only.
//
// A template with {% generation %} blocks marks the assistant text itself,
// as transformers' return_assistant_tokens_mask uses them: the spans are those
// blocks, the k-th given to the k-th assistant message (Message -1 when the
// template marks more blocks than there are assistant messages).
//
// Otherwise the spans come from rendering prefixes, as OpenRLHF and others
// do: for assistant message i, P = render(messages[:i], add_generation_prompt=
// true) and F = render(messages[:i+1]); the span is F[len(P):] — the
// message's text with the template's end-of-turn text (e.g. "4.<|im_end|>\n"
// for Qwen, "4.</s>" for TinyLlama), without the generation prompt. This needs
// P to be a prefix of F and F a prefix of the whole rendering; where the
// template breaks that, the error is a *SpanError naming the message.
func (t *Template) AssistantSpans(messages []Message, opts Options) (string, []Span, error) {
	opts.AddGenerationPrompt = false
	_, tm, err := t.pick(opts)
	if err != nil {
		return "", nil, err
	}
	full, gen, err := t.render(messagesValue(messages), opts)
	if err != nil {
		return "", nil, err
	}
	if tm.UsesGeneration() {
		var spans []Span
		k := 0
		for _, g := range gen {
			idx := -1
			for ; k < len(messages); k++ {
				if messages[k].Role == "assistant" {
					idx = k
					k++
					break
				}
			}
			spans = append(spans, Span{Message: idx, Start: g.Start, End: g.End})
		}
		return full, spans, nil
	}
	var spans []Span
	for i, m := range messages {
		if m.Role != "assistant" {
			continue
		}
		popts := opts
		popts.AddGenerationPrompt = true
		p, _, err := t.render(messagesValue(messages[:i]), popts)
		if err != nil {
			return "", nil, fmt.Errorf("rendering the messages before assistant message %d: %w", i, err)
		}
		f, _, err := t.render(messagesValue(messages[:i+1]), opts)
		if err != nil {
			return "", nil, fmt.Errorf("rendering the messages through assistant message %d: %w", i, err)
		}
		if !strings.HasPrefix(f, p) {
			return "", nil, &SpanError{Message: i, Reason: "the conversation before it, with the generation prompt, is not a prefix of the conversation through it"}
		}
		if !strings.HasPrefix(full, f) {
			return "", nil, &SpanError{Message: i, Reason: "the conversation through it is not a prefix of the whole conversation (the template renders it differently when messages follow)"}
		}
		spans = append(spans, Span{Message: i, Start: len(p), End: len(f)})
	}
	return full, spans, nil
}
