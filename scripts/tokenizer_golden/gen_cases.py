#!/usr/bin/python3
"""Generate tokenizer test texts for the golden comparison with Hugging Face.

Writes JSON lines to stdout, deterministic for a given --seed:
  {"kind": "...", "text": "..."}         a text to tokenize
  {"kind": "invalid", "hex": "e282..."}  raw bytes that are not valid UTF-8;
                                         the reference decodes them with
                                         TextDecoder (U+FFFD replacement)

The kinds cover what breaks byte-level BPE implementations: Unicode letters
and combining marks, CJK, emoji sequences, digits and long numbers,
whitespace runs of every kind (the GPT-2 pattern's lookahead rule),
contractions in both cases, punctuation runs, code, the OPT special tokens
inside text, dialogue text, and random mixes of all of these.

Two characters are left out on purpose: U+0085 (NEL) and U+FEFF (BOM).
Hugging Face's Rust tokenizer (Oniguruma's \\s is Unicode White_Space) and
JavaScript's \\s disagree on both, so JavaScript is no reference for them;
gochat's own tests pin them to the Rust behaviour.

Only characters assigned in this Python's Unicode database (14.0) are used,
so Go (15.0) and Node (17.0) classify them alike.

--family picks the special tokens written into the texts and adds kinds:
  opt    (default) the OPT cases above, unchanged;
  llama  Llama-2 / TinyLlama / Mistral: <s>, </s>, [INST], "▁", <0x0A>, ...;
  qwen   Qwen2 / Qwen2.5 / Qwen3 (and the Llama-3 pattern variant):
         <|im_start|>, <think>, <tool_call>, ...
  smollm SmolLM2: <|im_start|>, <|endoftext|>, <repo_name>, <file_sep>,
         <jupyter_code>, ... (the qwen texts with these tokens; see below)
For llama, qwen and smollm it adds the kinds nfc (text that NFC changes: NFD and
NFKD forms, Hangul jamo, singletons such as U+212B), lines (whitespace runs
with \n, \r\n, tabs, U+0085, U+2028, U+2029, U+FEFF, "\n\n  x"), digits
(digit runs of every length, which Qwen splits one by one and Llama-3 in
groups of three, Unicode digits) and chat (chat-template-shaped text).
U+0085 and U+FEFF are fine there: the JavaScript port runs Split patterns
with \s rewritten to \p{White_Space}, as Oniguruma has it, and
SentencePiece-style files have no pattern. One difference stays: for
(?i:'s|...) Oniguruma's case folding takes U+017F (ſ) as s and the
JavaScript port does not, so "'ſ" is rewritten to "'ž" in qwen texts
(gochat follows Oniguruma; TestOnigSplit checks it).

smollm texts are made as qwen's are, with SmolLM2's special tokens. The
JavaScript port and the Rust library disagree in three places on SmolLM2's
pre-tokenizer and model; gochat follows Rust (its own tests pin each), and
the texts avoid the first two:
  - U+0085 becomes U+2028 and U+FEFF becomes U+2060: SmolLM2's ByteLevel
    runs its own GPT-2 regex, where JavaScript's \s is not White_Space
    (as for opt);
  - the C0 controls U+0004, U+0006, U+0013, U+0014, U+0016 and U+001D are
    dropped: their bytes have no token in SmolLM2's vocabulary and there is
    no unk_token; Rust leaves such a byte out before merging (so its
    neighbours may merge), the JavaScript port keeps it in the word while
    merging and drops it after;
  - Unicode numbers stay: compare.mjs --variant digits writes the Digits
    step as the Split it is in Rust (char::is_numeric, \p{N}), where the
    JavaScript Digits takes ASCII \d only.

Usage: /usr/bin/python3 gen_cases.py [--seed N] [--scale K] [--family F] > cases.jsonl
"""

import argparse
import json
import random
import sys
import unicodedata

EXCLUDED = {"\u0085", "\ufeff"}


def assigned(c):
    return unicodedata.category(c) not in ("Cn", "Cs", "Co") and c not in EXCLUDED


def chars_in(lo, hi, cats=None):
    out = []
    for cp in range(lo, hi + 1):
        c = chr(cp)
        if assigned(c) and (cats is None or unicodedata.category(c) in cats):
            out.append(c)
    return out


LATIN = chars_in(0x41, 0x5A) + chars_in(0x61, 0x7A) + chars_in(0xC0, 0x24F, {"Lu", "Ll"})
GREEK = chars_in(0x391, 0x3C9, {"Lu", "Ll"})
CYRILLIC = chars_in(0x410, 0x44F)
ARABIC = chars_in(0x621, 0x64A)
HEBREW = chars_in(0x5D0, 0x5EA)
DEVANAGARI = chars_in(0x900, 0x97F)  # letters, vowel signs (Mc, Mn), digits
THAI = chars_in(0xE01, 0xE5B)
GEORGIAN = chars_in(0x10D0, 0x10FA)
HANGUL_JAMO = chars_in(0x1100, 0x11FF)
MARKS = chars_in(0x300, 0x36F)  # combining diacritics (Mn): not letters
CJK = chars_in(0x4E00, 0x9FFF)
CJK_EXT_B = chars_in(0x20000, 0x2A6DF)
HIRAGANA = chars_in(0x3041, 0x309F)
KATAKANA = chars_in(0x30A0, 0x30FF)
HANGUL = chars_in(0xAC00, 0xD7A3)
CJK_PUNCT = chars_in(0x3000, 0x303F) + chars_in(0xFF01, 0xFF65)
MATH_ALNUM = chars_in(0x1D400, 0x1D7FF)  # letters and digits outside the BMP
EMOJI = chars_in(0x1F300, 0x1F5FF) + chars_in(0x1F600, 0x1F64F) + chars_in(0x1F680, 0x1F6FF) + chars_in(0x1F900, 0x1F9FF) + chars_in(0x2600, 0x27BF)
SKIN = chars_in(0x1F3FB, 0x1F3FF)
REGIONAL = chars_in(0x1F1E6, 0x1F1FF)
DIGITS_OTHER = chars_in(0x660, 0x669) + chars_in(0x966, 0x96F) + chars_in(0xFF10, 0xFF19) + chars_in(0xE50, 0xE59)
NUMBER_OTHER = ["\u00b2", "\u00b3", "\u00b9", "\u00bc", "\u00bd", "\u00be", "\u2160", "\u2161", "\u216b", "\u2460", "\u2469", "\u3007", "\u2070", "\u2075"]
SPACES = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\u00a0", "\u1680"] + [chr(c) for c in range(0x2000, 0x200B)] + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
COMMON_SPACES = [" ", " ", " ", "\n", "\n", "\t", "\r", "\u00a0", "\u3000", "\r\n"]
FORMAT = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\u180e", "\ufe0f", "\ufe0e", "\u202e", "\u061c"]
CONTROLS = [chr(c) for c in range(0, 32) if chr(c) not in "\t\n\x0b\x0c\r"] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0) if c != 0x85]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["\u2018", "\u2019", "\u201c", "\u201d", "\u2026", "\u2013", "\u2014", "\u00ab", "\u00bb", "\u00bf", "\u00a1", "\u00b7", "\u2022", "\u20ac", "\u00a3", "\u00a5", "\u00a7", "\u00a9", "\u00ae", "\u2122", "\u00b0", "\u00b1", "\u00d7", "\u00f7"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Re", "'rE", "'Ll", "'lL", "'Ve", "'x", "'", "''", "'''", "\u2019s", "\u2019ll", "\u2019t"]
SPECIALS = ["</s>", "<pad>", "<s>", "<unk>", "<mask>", "<|endoftext|>", "</s", "<pad", "<pa d>", "</S>", "<PAD>", "< /s>", "<</s>>", "</s></s>", "<pad><pad>", "</s><pad>", "<pad></s>", "<<pad>>", "</s>>", "madeupword0000", "madeupword0002"]

WORDS = (
    "the of and to a in is you that it he was for on are as with his they I at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part "
    "hello world human assistant tokenizer language model reward policy training dataset question answer please thanks sorry really maybe nothing something everything"
).split()
NAMES = ["Alice", "Bob", "OPT", "GPT", "LLaMA", "DeepSpeed", "HuggingFace", "McDonald", "O'Brien", "iPhone", "JavaScript", "USA", "NASA", "Hmmm", "Mmm", "Zzz"]
CODE = [
    "def f(x):\n    return x ** 2\n",
    "for i in range(10):\n\tprint(i)\n",
    "func main() {\n\tfmt.Println(\"hi\")\n}\n",
    "if (a != b && c >= d) { return -1; }",
    "x = [1, 2, 3]; y = {'a': 1, \"b\": 2}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "SELECT * FROM users WHERE id = 1;",
    "const f = (a, b) => a?.b ?? c;",
    "    // comment\n    /* block */\n",
    "<div class=\"x\">&nbsp;</div>",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "let mut v: Vec<u8> = Vec::new();",
    "a::b::c->d.e[f](g)",
    "x+=1;y-=2;z*=3;w/=4;",
    "if __name__ == '__main__':\n    main()\n",
    "\t\t\treturn nil, fmt.Errorf(\"%w\", err)\n",
    "https://example.com/path?q=1&r=two#frag",
    "user.name+tag@example.co.uk",
    "```python\nprint('hi')\n```",
    "| a | b |\n|---|---|\n| 1 | 2 |",
]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, xs):
        return self.r.choice(xs)

    def word(self, alphabet, lo=1, hi=8):
        return "".join(self.r.choice(alphabet) for _ in range(self.r.randint(lo, hi)))

    def ws_run(self, lo=1, hi=5, kinds=None):
        kinds = kinds or SPACES
        return "".join(self.r.choice(kinds) for _ in range(self.r.randint(lo, hi)))

    def number(self):
        k = self.r.random()
        if k < 0.3:
            return str(self.r.randint(0, 10 ** self.r.randint(1, 6)))
        if k < 0.5:
            return "".join(self.r.choice("0123456789") for _ in range(self.r.randint(7, 60)))
        if k < 0.6:
            return "{:,}".format(self.r.randint(1000, 10 ** 12))
        if k < 0.7:
            return "%d.%d" % (self.r.randint(0, 999), self.r.randint(0, 99999))
        if k < 0.8:
            return "".join(self.r.choice(DIGITS_OTHER) for _ in range(self.r.randint(1, 8)))
        if k < 0.9:
            return self.word(NUMBER_OTHER, 1, 4)
        return self.pick(["1000", "2023", "3.14", "1e10", "0x1F", "007", "1st", "2nd", "10%", "$5", "-42", "+1"])

    def english(self, n):
        parts = []
        for i in range(n):
            w = self.pick(WORDS) if self.r.random() < 0.85 else self.pick(NAMES)
            if i == 0 or self.r.random() < 0.1:
                w = w[:1].upper() + w[1:]
            parts.append(w)
            if self.r.random() < 0.1:
                parts[-1] += self.pick([",", ".", "?", "!", ";", ":", "'s", "n't", "'ll"])
        return " ".join(parts)

    # Each kind returns one text.
    def letters(self):
        alpha = self.pick([LATIN, GREEK, CYRILLIC, ARABIC, HEBREW, DEVANAGARI, THAI, GEORGIAN, HANGUL_JAMO, MATH_ALNUM])
        words = []
        for _ in range(self.r.randint(1, 6)):
            w = self.word(alpha)
            if self.r.random() < 0.4:  # combining marks inside and after letters
                pos = self.r.randint(0, len(w))
                w = w[:pos] + self.word(MARKS, 1, 3) + w[pos:]
            if self.r.random() < 0.1:
                w += self.pick(FORMAT)
            words.append(w)
        sep = self.pick([" ", " ", "", "\n", "-", "  "])
        text = sep.join(words)
        if self.r.random() < 0.3:
            text = unicodedata.normalize(self.pick(["NFD", "NFC", "NFKD"]), text)
        return text

    def cjk(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.random()
            if k < 0.4:
                out.append(self.word(CJK, 1, 12))
            elif k < 0.55:
                out.append(self.word(HIRAGANA + KATAKANA, 1, 8))
            elif k < 0.7:
                out.append(self.word(HANGUL, 1, 6))
            elif k < 0.8:
                out.append(self.word(CJK_PUNCT, 1, 3))
            elif k < 0.85:
                out.append(self.word(CJK_EXT_B, 1, 3))
            elif k < 0.92:
                out.append(self.number())
            else:
                out.append(self.english(2))
            if self.r.random() < 0.3:
                out.append(self.pick([" ", "\u3000", "\n", ""]))
        return "".join(out)

    def emoji(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.random()
            if k < 0.35:
                out.append(self.pick(EMOJI))
            elif k < 0.5:
                out.append(self.pick(EMOJI) + self.pick(SKIN))
            elif k < 0.65:
                out.append("\u200d".join(self.pick(EMOJI) for _ in range(self.r.randint(2, 4))))
            elif k < 0.75:
                out.append(self.pick(REGIONAL) + self.pick(REGIONAL))
            elif k < 0.82:
                out.append(self.pick("0123456789#*") + "\ufe0f\u20e3")
            elif k < 0.9:
                out.append(self.pick(EMOJI) + "\ufe0f")
            else:
                out.append(self.english(self.r.randint(1, 4)))
            out.append(self.pick(["", " ", " ", "!", "\n", "  "]))
        return "".join(out)

    def numbers(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            out.append(self.number())
            out.append(self.pick([" ", "", ", ", " + ", "-", "/", ".", "\n", " x ", "abc", "%"]))
        return "".join(out)

    def whitespace(self):
        # Runs of every kind of whitespace before letters, numbers,
        # punctuation, other whitespace, and at both ends.
        atoms = [lambda: self.word(LATIN, 1, 5), lambda: self.number(), lambda: self.word(PUNCT, 1, 3),
                 lambda: self.word(CJK, 1, 2), lambda: self.pick(EMOJI), lambda: self.pick(CONTRACTIONS),
                 lambda: self.pick(["</s>", "<pad>"])]
        out = []
        if self.r.random() < 0.5:
            out.append(self.ws_run())
        for _ in range(self.r.randint(1, 6)):
            out.append(self.pick(atoms)())
            kinds = SPACES if self.r.random() < 0.5 else COMMON_SPACES
            out.append(self.ws_run(1, self.pick([1, 2, 3, 6]), kinds))
        if self.r.random() < 0.5:
            out.pop()
        return "".join(out)

    def contractions(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.random()
            w = self.word(LATIN[:52], 1, 6) if self.r.random() < 0.7 else self.pick(NAMES)
            c = self.pick(CONTRACTIONS)
            if k < 0.4:
                out.append(w + c)
            elif k < 0.55:
                out.append(w + " " + c)
            elif k < 0.65:
                out.append(c + w)
            elif k < 0.75:
                out.append(self.pick(PUNCT) + c)
            elif k < 0.85:
                out.append(w.upper() + c.upper())
            else:
                out.append(c + self.pick(["", " ", "\n", "1", "!"]))
            out.append(self.pick([" ", " ", "", "\n", "  ", ", "]))
        return "".join(out)

    def punctuation(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.random()
            if k < 0.4:
                out.append(self.word(PUNCT, 1, 8))
            elif k < 0.5:
                out.append(self.pick(["...", "!!!", "?!", "---", "***", "===", "~~~", "!?!?", "..", "''", '""', "``", "—", "…", "(!)"]))
            elif k < 0.6:
                out.append(self.word(CONTROLS + FORMAT, 1, 3))
            else:
                out.append(self.english(self.r.randint(1, 3)))
            out.append(self.pick([" ", "", "", "  ", "\n", " \n"]))
        return "".join(out)

    def code(self):
        text = "".join(self.pick(CODE) for _ in range(self.r.randint(1, 3)))
        if self.r.random() < 0.3:
            text = text.replace("    ", "\t")
        if self.r.random() < 0.3:
            text = text.replace("\n", "\r\n")
        if self.r.random() < 0.2:
            text = " " * self.r.randint(1, 8) + text
        return text

    def specials(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.random()
            if k < 0.5:
                out.append(self.pick(SPECIALS))
            elif k < 0.7:
                out.append(self.english(self.r.randint(1, 4)))
            elif k < 0.8:
                out.append(self.word(LATIN, 1, 4) + self.pick(SPECIALS) + self.word(LATIN, 1, 4))
            else:
                out.append(self.ws_run(1, 3, COMMON_SPACES))
            out.append(self.pick(["", " ", "\n", "  ", "\n\n"]))
        return "".join(out)

    def dialogue(self):
        out = []
        for _ in range(self.r.randint(1, 3)):
            out.append("\n\nHuman: " + self.english(self.r.randint(3, 20)) + self.pick(["?", ".", "!", ""]))
            out.append("\n\nAssistant: " + self.english(self.r.randint(3, 30)) + self.pick(["?", ".", "!", ""]))
        text = "".join(out)
        if self.r.random() < 0.3:
            text = text.replace("'", "\u2019")
        if self.r.random() < 0.2:
            text += self.pick(["</s>", "<|endoftext|>", "\n"])
        return text

    def mix(self):
        pools = [LATIN, GREEK, CYRILLIC, MARKS, CJK, HANGUL, EMOJI, SKIN, DIGITS_OTHER, NUMBER_OTHER, SPACES,
                 PUNCT, CONTROLS, FORMAT, list("0123456789"), list(" '"), MATH_ALNUM, ["</s>", "<pad>", "'s", "'LL"]]
        return "".join(self.pick(self.pick(pools)) for _ in range(self.r.randint(1, 40)))

    def long(self):
        # Long words and runs exercise the heap merge and cache limits.
        k = self.r.random()
        if k < 0.3:
            return self.pick(LATIN[:52]) * self.r.randint(49, 400)
        if k < 0.5:
            return self.word(LATIN[:52], 49, 300)
        if k < 0.6:
            return self.word(CJK, 50, 200)
        if k < 0.7:
            return " " * self.r.randint(10, 200) + "x"
        if k < 0.8:
            return self.ws_run(20, 100) + self.word(LATIN, 1, 5)
        if k < 0.9:
            return "".join(self.r.choice("0123456789") for _ in range(self.r.randint(60, 500)))
        return self.word(PUNCT, 50, 300)

    def invalid(self):
        good = self.pick([self.english(3), self.cjk(), self.emoji(), self.mix()]).encode("utf-8")
        bad = self.pick([b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe2\x82", b"\xe2\x82A", b"\xf0\x9f\x98", b"\xed\xa0\x80",
                         b"\x80", b"\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc2", b"\xe0\x80\x80",
                         b"\xf0\x80\x80\x80", b"\xe1\x80", b"\xf1\x80\x80"])
        pos = self.r.randint(0, len(good))
        while pos > 0 and pos < len(good) and (good[pos] & 0xC0) == 0x80:
            pos -= 1  # keep the good part's characters whole
        return good[:pos] + bad + good[pos:]


FIXED = [
    "", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n", "\n ", "a", " a", "  a", "\na", "\n\na", "\n\n a", "\t a", " \ta",
    "Hello, my name is", "\n\nHuman:", " 1000", "1000", "Hmmm", "<|endoftext|>", "</s>", "<pad>", "</s></s>", "a</s>b",
    "it's", "IT'S", "we'll", "WE'LL", "you're", "I've", "I'm", "he'd", "'s", "'S", " 's", "x 's", "?'s", "''s",
    "\u00a0", "\u3000", "a\u00a0b", "a\u3000b", "a \u00a0b", "a\u00a0 b", "\u2028", "a\u2029b",
    "🤗", "👍🏽", "👨‍👩‍👧", "🇯🇵", "1️⃣", "é", "e\u0301", "कि", "日本語", "한국어",
]


LLAMA_SPECIALS = ["<s>", "</s>", "<unk>", "[INST]", "[/INST]", "<<SYS>>\n", "\n<</SYS>>\n\n", "<|user|>", "<|assistant|>", "<|system|>",
                  "<0x0A>", "<0xFF>", "\u2581", "\u2581\u2581", "<s", "</s", "s>", "< s>", "<S>", "</S>", "<s><s>", "</s></s>", "<s></s>",
                  "<unk><unk>", "<<s>>", "</s>>", "<pad>", "<|endoftext|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>", "<|vision_pad|>", "<|image_pad|>",
                 "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                 "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>", "<|im_start", "im_end|>", "<|IM_START|>",
                 "<||>", "<|im_start|><|im_start|>", "<|im_end|>\n", "<think>\n\n</think>\n\n", "</s>", "<s>", "<|endoftext"]
SMOLLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>", "<gh_stars>",
                   "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
                   "<jupyter_output>", "<jupyter_script>", "<empty_output>", "<|im_start", "im_end|>", "<|IM_START|>", "<||>",
                   "<|im_start|><|im_start|>", "<|im_end|>\n", "<repo_name>x<file_sep>", "<jupyter_code>print(1)<jupyter_output>",
                   "<filename", "<empty_output >", "</s>", "<s>", "<|endoftext"]
# SMOLLM_DROP: characters left out of smollm texts (see the docstring).
SMOLLM_DROP = "\x04\x06\x13\x14\x16\x1d"
LINE_SPACES = ["\n", "\n", "\n\n", "\r\n", "\r", "\t", "\t\t", " ", "  ", "    ", "\u0085", "\u2028", "\u2029", "\ufeff", "\u00a0", "\u3000", "\x0b", "\x0c"]


class FamilyGen(Gen):
    """The extra kinds of the llama and qwen families."""

    def __init__(self, seed, specials):
        super().__init__(seed)
        self.specials_list = specials

    def nfc(self):
        base = self.pick([
            lambda: self.english(self.r.randint(1, 4)),
            lambda: self.word(LATIN, 1, 8),
            lambda: self.word(GREEK + CYRILLIC, 1, 6),
            lambda: self.word(HANGUL, 1, 4),
            lambda: self.word(DEVANAGARI, 1, 5),
            lambda: "".join(self.pick(["\u00e9", "\u00e8", "\u00fc", "\u00f1", "\u00e5", "\u00c5", "\u1e9b\u0323", "\u00f4", "\u01d7", "\u1ea5"]) for _ in range(self.r.randint(1, 5))),
        ])()
        k = self.r.random()
        if k < 0.4:
            base = unicodedata.normalize("NFD", base)
        elif k < 0.55:
            base = unicodedata.normalize("NFKD", base)
        elif k < 0.7:  # marks in non-canonical order
            base += self.pick(["\u0323\u0307", "\u0307\u0323", "\u0301\u0327", "\u0327\u0301", "\u0308\u0301"])
        elif k < 0.85:  # singletons and compatibility characters NFC keeps or maps
            base += self.pick(["\u212b", "\u2126", "\u212a", "\u00c5", "\ufb01", "\u2460", "\u1100\u1161\u11a8", "\u0041\u030a", "\u0344", "\u0958"])
        else:
            base = self.pick(MARKS) + base  # a leading combining mark
        return base + self.pick(["", " ", "\n", ".", " x"])

    def lines(self):
        out = []
        if self.r.random() < 0.4:
            out.append("".join(self.pick(LINE_SPACES) for _ in range(self.r.randint(1, 4))))
        for _ in range(self.r.randint(1, 6)):
            out.append(self.pick([lambda: self.english(self.r.randint(1, 3)), lambda: self.word(LATIN[:52], 1, 5), lambda: self.number(),
                                  lambda: self.word(PUNCT, 1, 3), lambda: self.word(CJK, 1, 3), lambda: self.pick(EMOJI), lambda: "x",
                                  lambda: self.pick(self.specials_list)])())
            out.append("".join(self.pick(LINE_SPACES) for _ in range(self.r.randint(1, 5))))
        if self.r.random() < 0.5:
            out.pop()
        return "".join(out)

    def digits(self):
        out = []
        for _ in range(self.r.randint(1, 5)):
            k = self.r.random()
            if k < 0.5:
                out.append("".join(self.r.choice("0123456789") for _ in range(self.r.randint(1, 20))))
            elif k < 0.65:
                out.append("{:,}".format(self.r.randint(0, 10 ** 12)))
            elif k < 0.75:
                out.append("%d.%0*d" % (self.r.randint(0, 99999), self.r.randint(1, 8), self.r.randint(0, 10 ** 6)))
            elif k < 0.85:
                out.append("".join(self.r.choice(DIGITS_OTHER + NUMBER_OTHER) for _ in range(self.r.randint(1, 7))))
            else:
                out.append(self.word(LATIN[:52], 1, 3) + str(self.r.randint(0, 10 ** self.r.randint(1, 9))))
            out.append(self.pick(["", " ", " ", "\n", "-", "/", ":", "x", "$", "%", " + "]))
        return "".join(out)

    def chat(self):
        msgs = []
        for _ in range(self.r.randint(1, 4)):
            role = self.pick(["system", "user", "assistant", "tool"])
            body = self.pick([lambda: self.english(self.r.randint(2, 25)), self.code, self.cjk, self.emoji, self.digits])()
            msgs.append((role, body))
        form = self.pick(["chatml", "llama2", "zephyr", "raw"])
        out = []
        for role, body in msgs:
            if form == "chatml":
                out.append("<|im_start|>" + role + "\n" + body + "<|im_end|>\n")
            elif form == "llama2":
                out.append(("<s>[INST] " + body + " [/INST]") if role != "assistant" else (" " + body + " </s>"))
            elif form == "zephyr":
                out.append("<|" + role + "|>\n" + body + "</s>\n")
            else:
                out.append(self.pick(self.specials_list) + body)
        if self.r.random() < 0.3:
            out.append(self.pick(["<|im_start|>assistant\n", "<|assistant|>\n", "[/INST]", "<think>\n"]))
        return "".join(out)


FAMILY_FIXED = [
    "Hello, world! \u4f60\u597d \U0001f642\n\n  x", "Hello</s>world", "<s>[INST] Hello", "<|im_start|>user\nHi!<|im_end|>\n",
    "Hello", " Hello", "  Hello", "\u2581Hello", "\u2581", " ", "\n\n  x", "\n\n\tx", "\t\tfoo", "a\u0085b", "\u0085", "x\u2028y", "\u2029",
    "\ufeffx", "e\u0301", "\u212b", "\u1100\u1161", "1", "12", "123", "1234", "12345", "1234567", "3.14159", "1,000,000", "\u0661\u0662\u0663",
    "it's", "IT'S", "it'S", "we'Ll", "'re", " 're", "\r\n\r\n", "a\r\n b", "<0x0A>", "<s>", "</s>", "<unk>", "<think>", "</think>",
    "</s><s>", "x</s>", "</s>x", " </s> ", "\n</s>\n", "<|endoftext|>", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u00ff\u0100",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--scale", type=int, default=1, help="multiply the number of generated texts")
    ap.add_argument("--family", choices=["opt", "llama", "qwen", "smollm"], default="opt", help="special tokens and extra kinds (see above)")
    args = ap.parse_args()
    global SPECIALS
    fixed = FIXED
    counts = {"letters": 700, "cjk": 500, "emoji": 500, "numbers": 500, "whitespace": 900, "contractions": 500,
              "punctuation": 500, "code": 200, "specials": 500, "dialogue": 300, "mix": 700, "long": 100, "invalid": 300}
    if args.family == "opt":
        g = Gen(args.seed)
    else:
        SPECIALS = {"llama": LLAMA_SPECIALS, "qwen": QWEN_SPECIALS, "smollm": SMOLLM_SPECIALS}[args.family]
        g = FamilyGen(args.seed, SPECIALS)
        fixed = FIXED + FAMILY_FIXED
        counts = {k: v // 2 for k, v in counts.items()}
        counts.update({"nfc": 500, "lines": 700, "digits": 500, "chat": 400, "specials": 500})

    def clean(text):
        if args.family == "qwen":
            text = text.replace("'\u017f", "'\u017e")  # see the docstring
        if args.family == "smollm":
            text = text.replace("\u0085", "\u2028").replace("\ufeff", "\u2060")
            text = "".join(c for c in text if c not in SMOLLM_DROP)
        return text

    def clean_bytes(b):
        if args.family == "smollm":
            b = b.replace("\u0085".encode(), "\u2028".encode()).replace("\ufeff".encode(), "\u2060".encode())
            b = bytes(c for c in b if chr(c) not in SMOLLM_DROP)
        return b

    w = sys.stdout
    for t in fixed:
        w.write(json.dumps({"kind": "fixed", "text": clean(t)}, ensure_ascii=False) + "\n")
    for kind, n in counts.items():
        fn = getattr(g, kind)
        for _ in range(n * args.scale):
            if kind == "invalid":
                w.write(json.dumps({"kind": kind, "hex": clean_bytes(fn()).hex()}) + "\n")
            else:
                w.write(json.dumps({"kind": kind, "text": clean(fn())}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
