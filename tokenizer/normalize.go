package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer is a tokenizer.json normalizer: the steps run in order on each
// piece of text between added tokens (Hugging Face normalizes the pieces
// that the added tokens with normalized false leave, one at a time, so a
// Prepend applies after every such token). nil is no normalizer. Read-only.
type normalizer []normStep

// normStep is one normalizer. It returns s itself when it changes nothing.
type normStep interface {
	normalize(s string) string
}

func (n normalizer) normalize(s string) string {
	for _, st := range n {
		s = st.normalize(s)
	}
	return s
}

// unicodeNorm is NFC, NFD, NFKC or NFKD (golang.org/x/text/unicode/norm;
// an already normalized string is returned without copying).
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) string { return u.form.String(s) }

// prependNorm is Prepend: the string in front of every non-empty piece.
type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replaceNorm is Replace with a String pattern: every occurrence, left to
// right, without overlaps.
type replaceNorm struct{ old, new string }

func (r replaceNorm) normalize(s string) string {
	if !strings.Contains(s, r.old) {
		return s
	}
	return strings.ReplaceAll(s, r.old, r.new)
}

// jsonNormalizer is the union of the normalizer objects' fields.
type jsonNormalizer struct {
	Type        string           `json:"type"`
	Normalizers []jsonNormalizer `json:"normalizers"`
	Prepend     *string          `json:"prepend"`
	Pattern     *jsonPattern     `json:"pattern"`
	Content     *string          `json:"content"`
}

// jsonPattern is a pattern of Replace and Split: {"String": "..."} or
// {"Regex": "..."}.
type jsonPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// parseNormalizer reads the normalizer section; field names it in errors.
func parseNormalizer(n *jsonNormalizer, field string) (normalizer, error) {
	if n == nil {
		return nil, nil
	}
	switch n.Type {
	case "Sequence":
		var out normalizer
		for i := range n.Normalizers {
			sub, err := parseNormalizer(&n.Normalizers[i], fmt.Sprintf("%s.normalizers[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		return out, nil
	case "NFC":
		return normalizer{unicodeNorm{norm.NFC}}, nil
	case "NFD":
		return normalizer{unicodeNorm{norm.NFD}}, nil
	case "NFKC":
		return normalizer{unicodeNorm{norm.NFKC}}, nil
	case "NFKD":
		return normalizer{unicodeNorm{norm.NFKD}}, nil
	case "Prepend":
		if n.Prepend == nil {
			return nil, fmt.Errorf("%s: Prepend without prepend", field)
		}
		return normalizer{prependNorm{*n.Prepend}}, nil
	case "Replace":
		old, err := stringPattern(n.Pattern, field)
		if err != nil {
			return nil, err
		}
		if n.Content == nil {
			return nil, fmt.Errorf("%s: Replace without content", field)
		}
		return normalizer{replaceNorm{old, *n.Content}}, nil
	case "":
		return nil, fmt.Errorf("%s: no type", field)
	}
	return nil, fmt.Errorf("%s: normalizer %q is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace)", field, n.Type)
}

// stringPattern returns the string of a {"String": s} pattern; Regex
// patterns of Replace are not supported (no real LLaMA-family file has one).
func stringPattern(p *jsonPattern, field string) (string, error) {
	switch {
	case p == nil:
		return "", fmt.Errorf("%s: Replace without pattern", field)
	case p.String != nil && *p.String != "":
		return *p.String, nil
	case p.String != nil:
		return "", fmt.Errorf("%s: empty pattern", field)
	case p.Regex != nil:
		return "", fmt.Errorf("%s: Regex patterns of Replace are not supported (only String)", field)
	}
	return "", errors.New(field + ": pattern is neither String nor Regex")
}
