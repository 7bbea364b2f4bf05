package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// decodeChain is a tokenizer.json decoder other than ByteLevel: steps that
// each turn the list of token strings into a new list (Hugging Face's
// decode_chain), whose concatenation is the text. The SentencePiece-style
// files (Llama-2, TinyLlama, Mistral) use Sequence[Replace("▁", " "),
// ByteFallback, Fuse, Strip(" ", 1, 0)]. Read-only.
type decodeChain []decodeStep

type decodeStep interface {
	decodeChain(toks []string) []string
}

func (d decodeChain) decode(toks []string) string {
	for _, st := range d {
		toks = st.decodeChain(toks)
	}
	return strings.Join(toks, "")
}

// replaceDec is the Replace decoder: a String pattern replaced in every
// token.
type replaceDec struct{ old, new string }

func (r replaceDec) decodeChain(toks []string) []string {
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(t, r.old, r.new)
	}
	return toks
}

// byteFallbackDec is the ByteFallback decoder: runs of <0xXX> tokens become
// the text of their bytes; a run that is not valid UTF-8 becomes one U+FFFD
// per byte, as Hugging Face's Rust decoder does (the JavaScript port
// replaces maximal ill-formed subparts instead).
type byteFallbackDec struct{}

// fallbackByte returns the byte of a "<0xXX>" token.
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(t[3])
	lo, ok2 := hexDigit(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (byteFallbackDec) decodeChain(toks []string) []string {
	out := toks[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range toks {
		if b, ok := fallbackByte(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fuseDec is the Fuse decoder: all tokens joined into one.
type fuseDec struct{}

func (fuseDec) decodeChain(toks []string) []string {
	return []string{strings.Join(toks, "")}
}

// stripDec is the Strip decoder: up to start leading and stop trailing
// copies of the character content removed from every token.
type stripDec struct {
	content     rune
	start, stop int
}

func (s stripDec) decodeChain(toks []string) []string {
	for i, t := range toks {
		for k := 0; k < s.start; k++ {
			r, n := utf8.DecodeRuneInString(t)
			if n == 0 || r != s.content {
				break
			}
			t = t[n:]
		}
		for k := 0; k < s.stop; k++ {
			r, n := utf8.DecodeLastRuneInString(t)
			if n == 0 || r != s.content {
				break
			}
			t = t[:len(t)-n]
		}
		toks[i] = t
	}
	return toks
}

// metaspaceDec is the Metaspace decoder: the replacement character becomes
// a space, except in the first token, where (unless prepend_scheme is
// never) every replacement character is dropped, as in Hugging Face's Rust
// code (the JavaScript port drops only a leading one).
type metaspaceDec struct {
	rep        string
	dropInHead bool
}

func (m metaspaceDec) decodeChain(toks []string) []string {
	for i, t := range toks {
		if i == 0 && m.dropInHead {
			toks[i] = strings.ReplaceAll(t, m.rep, "")
		} else {
			toks[i] = strings.ReplaceAll(t, m.rep, " ")
		}
	}
	return toks
}

// jsonDecoder is the union of the decoder objects' fields.
type jsonDecoder struct {
	Type          string        `json:"type"`
	Decoders      []jsonDecoder `json:"decoders"`
	Pattern       *jsonPattern  `json:"pattern"`
	Content       *string       `json:"content"`
	Start         int           `json:"start"`
	Stop          int           `json:"stop"`
	Replacement   *string       `json:"replacement"`
	PrependScheme *string       `json:"prepend_scheme"`
	// AddPrefixSpace is the pre-0.15 spelling of prepend_scheme
	// (true: always, false: never).
	AddPrefixSpace *bool `json:"add_prefix_space"`
}

// parseDecodeChain reads a decoder that is not ByteLevel.
func parseDecodeChain(d *jsonDecoder, field string) (decodeChain, error) {
	switch d.Type {
	case "Sequence":
		var out decodeChain
		for i := range d.Decoders {
			sub, err := parseDecodeChain(&d.Decoders[i], fmt.Sprintf("%s.decoders[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		return out, nil
	case "Replace":
		old, err := stringPattern(d.Pattern, field)
		if err != nil {
			return nil, err
		}
		if d.Content == nil {
			return nil, fmt.Errorf("%s: Replace without content", field)
		}
		return decodeChain{replaceDec{old, *d.Content}}, nil
	case "ByteFallback":
		return decodeChain{byteFallbackDec{}}, nil
	case "Fuse":
		return decodeChain{fuseDec{}}, nil
	case "Strip":
		if d.Content == nil || utf8.RuneCountInString(*d.Content) != 1 {
			return nil, fmt.Errorf("%s: Strip content must be one character", field)
		}
		if d.Start < 0 || d.Stop < 0 {
			return nil, fmt.Errorf("%s: Strip start and stop must not be negative", field)
		}
		r, _ := utf8.DecodeRuneInString(*d.Content)
		return decodeChain{stripDec{r, d.Start, d.Stop}}, nil
	case "Metaspace":
		rep, scheme, err := metaspaceSettings(d.Replacement, d.PrependScheme, d.AddPrefixSpace, field)
		if err != nil {
			return nil, err
		}
		return decodeChain{metaspaceDec{rep, scheme != prependNever}}, nil
	case "":
		return nil, fmt.Errorf("%s: no type", field)
	}
	return nil, fmt.Errorf("%s: decoder %q is not supported here (supported: Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace; ByteLevel alone)", field, d.Type)
}
