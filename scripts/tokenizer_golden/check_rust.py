#!/usr/bin/env python3
"""Compare `gochat tokenize` with Hugging Face's Rust tokenizers library
(or with transformers' AutoTokenizer, which runs it with the rules of
tokenizer_config.json).

The golden files of gochat's tests come from the JavaScript port
(compare.mjs), which differs from the Rust library in the places README.md
lists; gochat follows Rust there. This script checks gochat against the Rust
library itself (the Python package `tokenizers`, e.g. Debian's
python3-tokenizers) on the same texts, plus texts made of exactly those
places (--extra), encoding with add_special_tokens and decoding with and
without special tokens:

    python3 check_rust.py --gochat BIN --tokenizer DIR --cases cases.jsonl \\
        [--variant llama3] [--extra] [--decode] [--reference rust|transformers]

--cases takes gen_cases.py's output or a golden file (its "text" or "hex"
lines; "hex" bytes are decoded with U+FFFD for each maximal ill-formed
subpart, as TextDecoder does). --variant llama3 changes the tokenizer.json
as compare.mjs and the Go test's llama3Variant do (Llama-3's Split pattern,
ignore_merges). --reference transformers encodes with
AutoTokenizer.from_pretrained(DIR)(texts).input_ids and decodes with
batch_decode(clean_up_tokenization_spaces=False) instead of the bare
tokenizers.Tokenizer. Prints the counts and the first mismatches; exits 1
when any text differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

LLAMA3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
          "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

# The places where the JavaScript port and the Rust library disagree
# (README.md), written into short texts.
EXTRA = [
    "a\u0085b", "\u0085", " \u0085 x", "x\u0085\u0085", "line\u0085\n end", "\ufeffhello", "a \ufeff b", "\ufeff",
    "it'\u017f", "IT'\u017f a", "'\u017f", "don'\u017ft", "he'S and she'\u017f",
    "a\u0004b", "x\u0006\u0013y", "\u0014\u0016\u001d", "ab\u0004cd", " \u001d ", "the\u0013re",
    "\u0663\u0664\u0665", "x \u0663", "\u00b2 and \u00bd", "\u216b", "\uff11\uff12\uff13", "\u0967\u0968", "\u0e51\u0e52", "\U0001d7d9",
    "12345 \u0661\u0662\u0663\u0664", "v\u00b2 = 3\u00bd",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gochat", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--variant", choices=["llama3"])
    ap.add_argument("--extra", action="store_true", help="add the texts where JavaScript and Rust disagree")
    ap.add_argument("--decode", action="store_true", help="also compare decoding")
    ap.add_argument("--reference", choices=["rust", "transformers"], default="rust")
    a = ap.parse_args()
    import tokenizers

    tok_dir = a.tokenizer
    tmp = None
    if a.variant == "llama3":
        tmp = tempfile.TemporaryDirectory()
        tj = json.load(open(os.path.join(a.tokenizer, "tokenizer.json"), encoding="utf-8"))
        split = next(p for p in tj["pre_tokenizer"]["pretokenizers"] if p["type"] == "Split")
        split["pattern"]["Regex"] = LLAMA3
        tj["model"]["ignore_merges"] = True
        for name in os.listdir(a.tokenizer):
            if name != "tokenizer.json":
                with open(os.path.join(a.tokenizer, name), "rb") as f, open(os.path.join(tmp.name, name), "wb") as g:
                    g.write(f.read())
        json.dump(tj, open(os.path.join(tmp.name, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
        tok_dir = tmp.name
    if a.reference == "rust":
        rust = tokenizers.Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        ref_version = "tokenizers " + tokenizers.__version__

        def encode(ts):
            return [e.ids for e in rust.encode_batch(ts, add_special_tokens=True)]

        def decode(ids, skip):
            return rust.decode_batch(ids, skip_special_tokens=skip)
    else:
        import transformers
        hf = transformers.AutoTokenizer.from_pretrained(tok_dir)
        ref_version = "transformers %s %s, tokenizers %s" % (transformers.__version__, type(hf).__name__, tokenizers.__version__)

        def encode(ts):
            return hf(ts, add_special_tokens=True)["input_ids"]

        def decode(ids, skip):
            return hf.batch_decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)

    texts = []
    for line in open(a.cases, encoding="utf-8"):
        c = json.loads(line)
        if "hex" in c:
            texts.append(bytes.fromhex(c["hex"]).decode("utf-8", errors="replace"))
        elif "text" in c:
            texts.append(c["text"])
    if a.extra:
        texts += EXTRA

    def gochat(args, lines):
        p = subprocess.run([a.gochat, "tokenize", "--tokenizer", tok_dir] + args, input="".join(lines),
                           capture_output=True, text=True, encoding="utf-8")
        if p.returncode != 0:
            sys.exit("gochat tokenize %s: %s" % (" ".join(args), p.stderr.strip().splitlines()[-1:]))
        return [json.loads(l) for l in p.stdout.split("\n") if l]  # not splitlines: U+0085 is in texts

    got = [r["ids"] for r in gochat([], [json.dumps({"text": t}) + "\n" for t in texts])]
    want = encode(texts)
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    report = ["encode: %d of %d texts differ" % (len(bad), len(texts))]
    for i in bad[:5]:
        report.append("  %r: gochat %s, reference %s" % (texts[i][:80], got[i][:40], want[i][:40]))
    nbad = len(bad)
    if a.decode:
        for skip, flag in ((False, []), (True, ["--skip-special"])):
            d_got = [r["text"] for r in gochat(["--decode"] + flag, [json.dumps({"ids": ids}) + "\n" for ids in want])]
            d_want = decode(want, skip)
            bad = [i for i in range(len(texts)) if d_got[i] != d_want[i]]
            report.append("decode (skip_special_tokens %s): %d of %d differ" % (skip, len(bad), len(texts)))
            for i in bad[:5]:
                report.append("  %s: gochat %r, reference %r" % (want[i][:20], d_got[i][:80], d_want[i][:80]))
            nbad += len(bad)
    print("%s %s (%s)%s" % ("PASS" if nbad == 0 else "FAIL", a.tokenizer + (" --variant " + a.variant if a.variant else ""),
                            ref_version, "".join("\n" + r for r in report)))
    return 0 if nbad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
