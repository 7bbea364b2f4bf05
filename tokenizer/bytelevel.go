package tokenizer

import "unicode/utf8"

// byteLevelAlphabet returns GPT-2's bytes_to_unicode table: byte b is written
// as the rune alphabet[b] in byte-level vocabularies. Printable Latin-1 bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes
// (controls, space, 0x7F-0xA0, soft hyphen) become U+0100 onwards in byte
// order, so the space 0x20 is 'Ġ' (U+0120) and '\n' is 'Ċ' (U+010A).
func byteLevelAlphabet() [256]rune {
	var a [256]rune
	n := rune(0)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			a[b] = rune(b)
		} else {
			a[b] = 256 + n
			n++
		}
	}
	return a
}

// byteLevelString maps raw bytes to their byte-level spelling, the form the
// keys of vocab.json and merges.txt are written in.
func byteLevelString(alpha *[256]rune, raw string) string {
	out := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		out = utf8.AppendRune(out, alpha[raw[i]])
	}
	return string(out)
}

// byteLevelDecode turns a vocabulary token back into the raw bytes it stands
// for, as Hugging Face's ByteLevel decoder does: every rune is looked up in
// the inverse alphabet, and a token holding any rune outside the alphabet
// (an added token such as "hello world") is passed through as its own UTF-8
// bytes.
func byteLevelDecode(inv map[rune]byte, tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := inv[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}
