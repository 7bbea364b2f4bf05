package tokenizer

import "unicode/utf8"

// appendValidUTF8 appends s to dst with every ill-formed sequence replaced
// by U+FFFD using the "maximal subpart" rule of the Unicode standard (§3.9,
// U+FFFD substitution of maximal subparts). This is what Rust's
// String::from_utf8_lossy (Hugging Face's ByteLevel decoder), Python's
// bytes.decode(errors="replace") and JavaScript's TextDecoder do: "\xE2\x82A"
// becomes "\uFFFDA" (one replacement for the truncated sequence), "\xFF\xFE"
// becomes two.
func appendValidUTF8(dst []byte, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r != utf8.RuneError || n != 1 {
			dst = append(dst, s[i:i+n]...)
			i += n
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(s[i:])
	}
	return dst
}

// maximalSubpart returns the length of the longest prefix of s (which does
// not start with a well-formed character) that is the start of some
// well-formed UTF-8 sequence, or 1.
func maximalSubpart(s []byte) int {
	// lo, hi bound the second byte; later bytes are 0x80..0xBF.
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch c := s[0]; {
	case 0xC2 <= c && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case 0xE1 <= c && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case 0xF1 <= c && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 1; k <= need && k < len(s); k++ {
		b := s[k]
		if k > 1 {
			lo, hi = 0x80, 0xBF
		}
		if b < lo || b > hi {
			break
		}
		n++
	}
	return n
}
