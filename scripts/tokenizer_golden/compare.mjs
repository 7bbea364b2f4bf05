// Tokenize the cases of gen_cases.py with Hugging Face's JavaScript port of
// tokenizers (@huggingface/tokenizers, an implementation independent of
// gochat's) and write them with their ids as the golden file gochat's tests
// compare against; or compare a gochat output with it.
//
//   node compare.mjs --tokenizer DIR --cases cases.jsonl --write golden.jsonl
//   node compare.mjs --tokenizer DIR --cases cases.jsonl --check gochat.jsonl
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
let cfg = {};
const cfgPath = path.join(a.tokenizer, "tokenizer_config.json");
if (fs.existsSync(cfgPath)) cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
const tok = new Tokenizer(tokJSON, cfg);
const decoder = new TextDecoder("utf-8", { fatal: false });

const cases = readJSONL(a.cases);
const out = cases.map((c) => {
  const text = c.hex !== undefined ? decoder.decode(Buffer.from(c.hex, "hex")) : c.text;
  return { ...c, ids: tok.encode(text).ids };
});

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
