package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2 3.1's lexer.py with the settings transformers uses
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, the
// default delimiters, no line statements):
//
//   - line breaks \r\n, \r and \n all become \n, and one trailing newline of
//     the source is dropped;
//   - "{%-", "{{-" and "{#-" strip all whitespace before the tag; otherwise a
//     block or comment tag ("{%", "{#", not "{{") that only whitespace
//     separates from the start of its line drops that whitespace, unless
//     written "{%+";
//   - "-%}", "-}}" and "-#}" strip all whitespace after the tag; otherwise
//     "%}" and "#}" eat one newline right after them, unless written "+%}";
//   - inside a tag, "}}" and "%}" only end it when brackets are balanced.

type tokKind uint8

const (
	tData tokKind = iota
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
	tEOF
)

func (k tokKind) String() string {
	return [...]string{"template data", "begin of print statement", "end of print statement",
		"begin of statement block", "end of statement block", "name", "string", "integer", "float",
		"operator", "end of template"}[k]
}

type token struct {
	kind tokKind
	val  string // data, name, operator, decoded string
	ival int
	fval float64
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tName, tOp:
		return fmt.Sprintf("'%s'", t.val)
	case tString:
		return "string"
	}
	return "'" + t.kind.String() + "'"
}

// SyntaxError is a template that does not parse (jinja2's TemplateSyntaxError).
type SyntaxError struct {
	Msg  string
	Line int
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool
	toks         []token
}

// normalizeNewlines turns \r\n and \r into \n and drops one trailing newline.
func normalizeNewlines(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.TrimSuffix(s, "\n")
}

func lex(src string) ([]token, error) {
	l := &lexer{src: normalizeNewlines(src), line: 1, lineStarting: true}
	if err := l.run(); err != nil {
		return nil, err
	}
	l.toks = append(l.toks, token{kind: tEOF, line: l.line})
	return l.toks, nil
}

func (l *lexer) errorf(format string, a ...any) error {
	return &SyntaxError{Msg: fmt.Sprintf(format, a...), Line: l.line}
}

func (l *lexer) emit(kind tokKind, val string) {
	l.toks = append(l.toks, token{kind: kind, val: val, line: l.line})
}

func (l *lexer) advance(to int) {
	l.line += strings.Count(l.src[l.pos:to], "\n")
	l.pos = to
}

// stripText applies the whitespace control of a tag with sign ('-', '+' or 0)
// to the text before it; lstrip says whether lstrip_blocks applies (a block or
// comment tag).
func (l *lexer) stripText(text string, sign byte, lstrip bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, isPySpace)
	}
	if sign != '+' && lstrip {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || l.lineStarting {
			rest := text[lpos:]
			if rest != "" && strings.TrimLeftFunc(rest, isPySpace) == "" {
				return text[:lpos]
			}
		}
	}
	return text
}

// endLen returns the length of a tag end at l.pos ("%}", "}}", "#}" with their
// whitespace control), or 0.
func (l *lexer) endLen(closer string, trim bool) int {
	s := l.src[l.pos:]
	switch {
	case trim && strings.HasPrefix(s, "+"+closer):
		return 3
	case strings.HasPrefix(s, "-"+closer):
		n := 3
		for n < len(s) {
			r, w := utf8.DecodeRuneInString(s[n:])
			if !isPySpace(r) {
				break
			}
			n += w
		}
		return n
	case strings.HasPrefix(s, closer):
		if trim && strings.HasPrefix(s[2:], "\n") {
			return 3
		}
		return 2
	}
	return 0
}

func (l *lexer) run() error {
	src := l.src
	for l.pos < len(src) {
		i := l.pos
		for i+1 < len(src) && !(src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#')) {
			i++
		}
		if i+1 >= len(src) {
			l.emit(tData, src[l.pos:])
			l.advance(len(src))
			return nil
		}
		kind := src[i+1]
		j := i + 2
		var sign byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		text := l.stripText(src[l.pos:i], sign, kind != '{')
		if text != "" {
			l.emit(tData, text)
		}
		l.advance(i)
		l.lineStarting = false
		switch kind {
		case '#':
			l.advance(j)
			if err := l.comment(); err != nil {
				return err
			}
		case '%':
			if n, ok := l.rawBegin(j); ok {
				l.advance(n)
				if err := l.raw(); err != nil {
					return err
				}
				continue
			}
			l.advance(j)
			l.emit(tBlockBegin, "")
			if err := l.tag("%}", true, tBlockEnd); err != nil {
				return err
			}
		case '{':
			l.advance(j)
			l.emit(tVarBegin, "")
			if err := l.tag("}}", false, tVarEnd); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *lexer) comment() error {
	for p := l.pos; p < len(l.src); p++ {
		save := l.pos
		l.pos = p
		n := l.endLen("#}", true)
		l.pos = save
		if n > 0 {
			end := l.src[p : p+n]
			l.advance(p + n)
			l.lineStarting = strings.HasSuffix(end, "\n")
			return nil
		}
	}
	return l.errorf("Missing end of comment tag")
}

// rawBegin matches `\s*raw\s*(-%}\s*|%})` at j (after "{%" and its sign) and
// returns the end of the match.
func (l *lexer) rawBegin(j int) (int, bool) {
	s := l.src
	p := skipSpace(s, j)
	if !strings.HasPrefix(s[p:], "raw") {
		return 0, false
	}
	p = skipSpace(s, p+3)
	switch {
	case strings.HasPrefix(s[p:], "-%}"):
		return skipSpace(s, p+3), true
	case strings.HasPrefix(s[p:], "%}"):
		return p + 2, true
	}
	return 0, false
}

func skipSpace(s string, p int) int {
	for p < len(s) {
		r, w := utf8.DecodeRuneInString(s[p:])
		if !isPySpace(r) {
			break
		}
		p += w
	}
	return p
}

// raw reads a raw block's body up to its {% endraw %}.
func (l *lexer) raw() error {
	s := l.src
	l.lineStarting = strings.HasSuffix(s[:l.pos], "\n")
	for p := l.pos; p+1 < len(s); p++ {
		if s[p] != '{' || s[p+1] != '%' {
			continue
		}
		j := p + 2
		var sign byte
		if j < len(s) && (s[j] == '-' || s[j] == '+') {
			sign = s[j]
			j++
		}
		q := skipSpace(s, j)
		if !strings.HasPrefix(s[q:], "endraw") {
			continue
		}
		q = skipSpace(s, q+6)
		save := l.pos
		l.pos = q
		n := l.endLen("%}", true)
		l.pos = save
		if n == 0 {
			continue
		}
		text := l.stripText(s[l.pos:p], sign, true)
		if text != "" {
			l.emit(tData, text)
		}
		l.advance(q + n)
		l.lineStarting = strings.HasSuffix(s[q:q+n], "\n")
		return nil
	}
	return l.errorf("Missing end of raw directive")
}

var operators = []string{"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// tag lexes the inside of a {{ }} or {% %} up to its end.
func (l *lexer) tag(closer string, trim bool, end tokKind) error {
	s := l.src
	var balance []byte
	for {
		if l.pos >= len(s) {
			return l.errorf("unexpected end of template")
		}
		if len(balance) == 0 {
			if n := l.endLen(closer, trim); n > 0 {
				l.emit(end, "")
				endText := s[l.pos : l.pos+n]
				l.advance(l.pos + n)
				l.lineStarting = strings.HasSuffix(endText, "\n")
				return nil
			}
		}
		r, w := utf8.DecodeRuneInString(s[l.pos:])
		switch {
		case isPySpace(r):
			l.advance(skipSpace(s, l.pos))
		case r >= '0' && r <= '9':
			if err := l.number(); err != nil {
				return err
			}
		case r == '_' || unicode.IsLetter(r):
			p := l.pos + w
			for p < len(s) {
				r, w := utf8.DecodeRuneInString(s[p:])
				if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				p += w
			}
			l.emit(tName, s[l.pos:p])
			l.advance(p)
		case r == '\'' || r == '"':
			if err := l.str(byte(r)); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(s[l.pos:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return l.errorf("unexpected char %s at %d", pyRepr(string(r)), l.pos)
			}
			switch op {
			case "(", "[", "{":
				balance = append(balance, map[string]byte{"(": ')', "[": ']', "{": '}'}[op])
			case ")", "]", "}":
				if len(balance) == 0 {
					return l.errorf("unexpected '%s'", op)
				}
				if want := balance[len(balance)-1]; want != op[0] {
					return l.errorf("unexpected '%s', expected '%c'", op, want)
				}
				balance = balance[:len(balance)-1]
			}
			l.emit(tOp, op)
			l.advance(l.pos + len(op))
		}
	}
}

// digitsEnd matches (\d+_)*\d+ at p and returns its end, or -1.
func digitsEnd(s string, p int, isDigit func(byte) bool) int {
	if p >= len(s) || !isDigit(s[p]) {
		return -1
	}
	for p < len(s) {
		switch {
		case isDigit(s[p]):
			p++
		case s[p] == '_' && p+1 < len(s) && isDigit(s[p+1]):
			p++
		default:
			return p
		}
	}
	return p
}

func isDec(c byte) bool { return c >= '0' && c <= '9' }

// number lexes jinja2's float_re or integer_re at l.pos.
func (l *lexer) number() error {
	s, p := l.src, l.pos
	if p > 0 && s[p-1] == '.' {
		// (?<!\.): after a dot only an integer ("x.0.1" is x[0][1]).
		return l.integer()
	}
	q := digitsEnd(s, p, isDec)
	exponent := func(at int) int {
		if at < len(s) && (s[at] == 'e' || s[at] == 'E') {
			k := at + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			return digitsEnd(s, k, isDec)
		}
		return -1
	}
	end := -1
	if q < len(s) && s[q] == '.' {
		if f := digitsEnd(s, q+1, isDec); f > 0 {
			end = f
			if e := exponent(f); e > 0 {
				end = e
			}
		}
	} else if e := exponent(q); e > 0 {
		end = e
	}
	if end < 0 {
		return l.integer()
	}
	text := strings.ReplaceAll(s[p:end], "_", "")
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return l.errorf("bad float %q", text)
	}
	l.toks = append(l.toks, token{kind: tFloat, fval: f, line: l.line})
	l.advance(end)
	return nil
}

func (l *lexer) integer() error {
	s, p := l.src, l.pos
	base, end := 10, -1
	if s[p] == '0' && p+1 < len(s) {
		var isD func(byte) bool
		switch s[p+1] {
		case 'b', 'B':
			base, isD = 2, func(c byte) bool { return c == '0' || c == '1' }
		case 'o', 'O':
			base, isD = 8, func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x', 'X':
			base, isD = 16, func(c byte) bool {
				return isDec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
			}
		}
		if isD != nil {
			k := p + 2
			if k < len(s) && s[k] == '_' {
				k++
			}
			end = digitsEnd(s, k, isD)
			if end < 0 {
				base = 10
			}
		}
	}
	if end < 0 {
		base = 10
		if s[p] == '0' {
			end = p + 1
			for end < len(s) && (s[end] == '0' || (s[end] == '_' && end+1 < len(s) && s[end+1] == '0')) {
				end++
			}
		} else {
			end = digitsEnd(s, p, isDec)
		}
	}
	text := strings.ReplaceAll(s[p:end], "_", "")
	if base != 10 {
		text = text[2:]
	}
	n, err := strconv.ParseInt(text, base, 64)
	if err != nil {
		return l.errorf("integer %s out of range", s[p:end])
	}
	l.toks = append(l.toks, token{kind: tInt, ival: int(n), line: l.line})
	l.advance(end)
	return nil
}

// str lexes a quoted string and decodes it as jinja2 does (Python's
// unicode-escape codec over the text).
func (l *lexer) str(q byte) error {
	s := l.src
	p := l.pos + 1
	for p < len(s) && s[p] != q {
		if s[p] == '\\' {
			p++
		}
		p++
	}
	if p >= len(s) {
		return l.errorf("unexpected char %s at %d", pyRepr(string(q)), l.pos)
	}
	val, err := unescape(s[l.pos+1 : p])
	if err != nil {
		return l.errorf("%v", err)
	}
	l.emit(tString, val)
	l.advance(p + 1)
	return nil
}

// unescape is Python's s.encode("ascii", "backslashreplace").decode("unicode-escape").
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			r, w := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r)
			i += w
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("\\ at end of string")
		}
		c := s[i+1]
		i += 2
		switch c {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(c)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n := int(c - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				n = n*8 + int(s[i]-'0')
				i++
			}
			b.WriteRune(rune(n))
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", c)
			}
			v, err := strconv.ParseUint(s[i:i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", fmt.Errorf("bad \\%c escape", c)
			}
			b.WriteRune(rune(v))
			i += n
		default:
			if c >= utf8.RuneSelf {
				// backslashreplace wrote the character as an escape the codec
				// then reads literally after the lone backslash.
				r, w := utf8.DecodeRuneInString(s[i-1:])
				i += w - 1
				b.WriteByte('\\')
				switch {
				case r < 0x100:
					fmt.Fprintf(&b, "x%02x", r)
				case r < 0x10000:
					fmt.Fprintf(&b, "u%04x", r)
				default:
					fmt.Fprintf(&b, "U%08x", r)
				}
				continue
			}
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
