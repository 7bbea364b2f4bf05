#!/usr/bin/python3
"""Write tokenizer/testdata/onig_split.jsonl.gz: how Oniguruma, the regex
engine of Hugging Face's Rust tokenizers, splits texts with the GPT-2,
Llama-3 and Qwen2 pre-tokenizer patterns. TestOnigSplit checks gochat's
hand-written scanners (gpt2Next, llamaNext) against it.

Needs onig_split (onig_split.c here, built against Debian's libonig-dev) and
the cases of gen_cases.py (family qwen: every kind, U+0085 and U+2028 included):

  apt-get install libonig-dev && cc -O2 -o /tmp/onig_split onig_split.c -lonig
  /usr/bin/python3 gen_cases.py --family qwen > cases_qwen.jsonl
  /usr/bin/python3 onig_golden.py --onig /tmp/onig_split cases_qwen.jsonl \\
      | gzip -9 > ../../tokenizer/testdata/onig_split.jsonl.gz

Every text of the case files is used (invalid ones as the U+FFFD-repaired
text), plus texts around the case-folding corner U+017F (ſ). Each output line
is {"text": ..., "gpt2": [...], "llama3": [...], "qwen2": [...]} with the end
offsets (bytes) of the matches; the matches of these patterns cover the text.
"""

import argparse
import json
import random
import subprocess
import sys

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def extra_texts():
    r = random.Random(7)
    atoms = ["'", "'s", "'S", "'\u017f", "\u017f", "'\u017ft", "'ll", "'LL", "'lL", "'re", "'RE", "a", "Z", "1", "123", "12345", " ", "  ", "\n", "\r\n",
             "\t", "\u0085", "\u2028", "\u00a0", "\ufeff", ".", "!?", "\u00e9", "\u0301", "\u4e2d", "\U0001f642"]
    out = ["'\u017f", "'\u017fa", "x'\u017f", "'\u017f'\u017f", " '\u017f", "'\u212a", "'\ufb06"]
    for _ in range(500):
        out.append("".join(r.choice(atoms) for _ in range(r.randint(1, 12))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onig", required=True, help="the onig_split binary")
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args()
    texts, seen = [], set()
    for path in args.cases:
        for line in open(path, encoding="utf-8"):
            c = json.loads(line)
            t = c["text"] if "text" in c else bytes.fromhex(c["hex"]).decode("utf-8", errors="replace")
            if t and t not in seen:
                seen.add(t)
                texts.append(t)
    for t in extra_texts():
        if t not in seen:
            seen.add(t)
            texts.append(t)
    hexed = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
    ends = {}
    for name, pat in PATTERNS.items():
        out = subprocess.run([args.onig, pat], input=hexed, capture_output=True, text=True, check=True).stdout.split("\n")
        rows = []
        for t, line in zip(texts, out):
            spans = [tuple(map(int, m.split("-"))) for m in line.split()]
            pos = 0
            for a, b in spans:
                if a != pos:
                    sys.exit(f"{name}: {t!r}: the matches leave a gap at byte {pos}")
                pos = b
            if pos != len(t.encode("utf-8")):
                sys.exit(f"{name}: {t!r}: the matches end at byte {pos}")
            rows.append([b for _, b in spans])
        ends[name] = rows
    for i, t in enumerate(texts):
        sys.stdout.write(json.dumps({"text": t, **{n: ends[n][i] for n in PATTERNS}}, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stderr.write(f"{len(texts)} texts\n")


if __name__ == "__main__":
    main()
