// Tokenize the cases of gen_cases.py with Hugging Face's JavaScript port of
// tokenizers (@huggingface/tokenizers, an implementation independent of
// gochat's) and write them with their ids as the golden file gochat's tests
// compare against; or compare a gochat output with it.
//
//   node compare.mjs --tokenizer DIR --cases cases.jsonl --write golden.jsonl
//   node compare.mjs --tokenizer DIR --cases cases.jsonl --check gochat.jsonl
//
// Options for the LLaMA-family files:
//   --decode 1       also decode the ids (skip_special_tokens false, and
//                    true) with clean_up_tokenization_spaces false, and
//                    write "dec" / "decs" when they differ from the text /
//                    from "dec";
//   --config DIR     read tokenizer_config.json from DIR instead;
//   --variant llama3 change the tokenizer.json before use as
//                    tokenizer/golden_test.go's llama3Variant does: the
//                    Split pattern becomes Llama-3's (\p{N}{1,3}) and the
//                    model gets ignore_merges true (Llama-3's own file is
//                    not under a permissive licence);
//   --variant digits every Digits pre-tokenizer becomes the Split it is in
//                    Hugging Face's Rust library: each character with
//                    char::is_numeric (\p{N}) isolated (individual_digits)
//                    or runs of them, where the JavaScript Digits takes
//                    ASCII \d only (SmolLM2: "٣" or "²" after a space).
//                    The number of cases whose ids this changes is printed.
//
// --write: one line per case, {"kind", "text" | "hex", "ids"}; ids include
// the BOS of OPT's post-processor (add_special_tokens true). A "hex" case is
// raw bytes that are not valid UTF-8: they are decoded with TextDecoder
// (U+FFFD for each maximal ill-formed subpart) before tokenizing.
// --check: gochat.jsonl holds {"ids": [...]} lines, one per "text" case in
// order (what `gochat tokenize --tokenizer DIR` prints for the text cases);
// mismatches are listed and the exit status is 1 if there are any.
//
// Needs `npm install @huggingface/tokenizers` in this directory or a parent
// (or NODE_PATH); see README.md here.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

function args() {
  const a = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) usage();
    a[argv[i].slice(2)] = argv[i + 1];
  }
  if (!a.tokenizer || !a.cases || !(a.write || a.check)) usage();
  return a;
}

function usage() {
  console.error("usage: node compare.mjs --tokenizer DIR --cases cases.jsonl (--write golden.jsonl | --check gochat.jsonl)");
  process.exit(2);
}

// loadTokenizers finds @huggingface/tokenizers from the working directory
// (where npm install put it) rather than from this script's directory.
async function loadTokenizers() {
  const req = createRequire(path.join(process.cwd(), "noop.js"));
  let p;
  try {
    p = req.resolve("@huggingface/tokenizers");
  } catch {
    console.error("cannot find @huggingface/tokenizers: run `npm install @huggingface/tokenizers` in the working directory");
    process.exit(2);
  }
  const mod = await import(p);
  const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(p), "..", "package.json"), "utf8"));
  return { Tokenizer: mod.Tokenizer ?? mod.default.Tokenizer, version: pkg.version };
}

function readJSONL(file) {
  return fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

const a = args();
const { Tokenizer, version } = await loadTokenizers();
const tokJSON = JSON.parse(fs.readFileSync(path.join(a.tokenizer, "tokenizer.json"), "utf8"));
if (a.variant === "llama3") {
  const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const split = tokJSON.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
  split.pattern.Regex = LLAMA3;
  tokJSON.model.ignore_merges = true;
} else if (a.variant !== undefined && a.variant !== "digits") {
  console.error(`unknown --variant ${a.variant}`);
  process.exit(2);
}
let cfg = {};
const cfgPath = path.join(a.config ?? a.tokenizer, "tokenizer_config.json");
if (fs.existsSync(cfgPath)) cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
// plain is the file as it is, for counting what --variant digits changes.
let plain = null;
if (a.variant === "digits") {
  plain = new Tokenizer(JSON.parse(JSON.stringify(tokJSON)), cfg);
  let n = 0;
  const rewrite = (p) => {
    if (p === null || typeof p !== "object") return p;
    if (p.type === "Sequence") return { ...p, pretokenizers: p.pretokenizers.map(rewrite) };
    if (p.type !== "Digits") return p;
    n++;
    return { type: "Split", pattern: { Regex: p.individual_digits ? "\\p{N}" : "\\p{N}+" }, behavior: "Isolated", invert: false };
  };
  tokJSON.pre_tokenizer = rewrite(tokJSON.pre_tokenizer);
  if (n === 0) {
    console.error("--variant digits: the tokenizer has no Digits pre-tokenizer");
    process.exit(2);
  }
}
const tok = new Tokenizer(tokJSON, cfg);
const decoder = new TextDecoder("utf-8", { fatal: false });

const cases = readJSONL(a.cases);
const out = cases.map((c) => {
  const text = c.hex !== undefined ? decoder.decode(Buffer.from(c.hex, "hex")) : c.text;
  const ids = tok.encode(text).ids;
  const r = { ...c, ids };
  if (a.decode && ids.length > 0) {
    const dec = tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    const decs = tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
    if (dec !== text) r.dec = dec;
    if (decs !== dec) r.decs = decs;
  }
  return r;
});

if (plain !== null) {
  const changed = out.filter((c) => {
    const p = plain.encode(c.hex !== undefined ? decoder.decode(Buffer.from(c.hex, "hex")) : c.text).ids;
    return p.length !== c.ids.length || p.some((x, k) => x !== c.ids[k]);
  }).length;
  console.error(`--variant digits: ${changed} of ${out.length} cases have other ids than with the JavaScript Digits`);
}
if (a.write) {
  fs.writeFileSync(a.write, out.map((c) => JSON.stringify(c)).join("\n") + "\n");
  console.error(`@huggingface/tokenizers ${version}: wrote ${out.length} cases to ${a.write}`);
} else {
  const texts = out.filter((c) => c.hex === undefined);
  const got = readJSONL(a.check);
  if (got.length !== texts.length) {
    console.error(`${a.check} has ${got.length} lines, want ${texts.length} (one per text case)`);
    process.exit(1);
  }
  let bad = 0;
  texts.forEach((c, i) => {
    const g = got[i].ids;
    if (g.length !== c.ids.length || g.some((x, k) => x !== c.ids[k])) {
      if (bad++ < 20) console.log(JSON.stringify({ line: i + 1, kind: c.kind, text: c.text, js: c.ids, gochat: g }));
    }
  });
  console.error(`@huggingface/tokenizers ${version}: ${texts.length - bad} of ${texts.length} text cases identical`);
  process.exit(bad ? 1 : 0);
}
