// Measure the encoding speed of @huggingface/tokenizers (Hugging Face's
// JavaScript port) on the same corpus as gochat's BenchmarkEncode, for the
// comparison quoted in the README:
//
//   go test ./tokenizer -run TestWriteBenchCorpus -benchcorpus /tmp/corpus.jsonl
//   node scripts/tokenizer_golden/bench.mjs --tokenizer DIR --corpus /tmp/corpus.jsonl
//
// It encodes the corpus text by text, as BenchmarkEncode does: "warm" keeps
// the tokenizer's BPE cache between passes, "cold" clears it before each.
// Each is timed over --passes passes after one warm-up; the median MB/s
// (MB = 1e6 bytes of UTF-8, as Go's benchmarks count) is printed.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const argv = process.argv.slice(2);
const a = { passes: "7" };
for (let i = 0; i < argv.length; i += 2) a[argv[i].replace(/^--/, "")] = argv[i + 1];
if (!a.tokenizer || !a.corpus) {
  console.error("usage: node bench.mjs --tokenizer DIR --corpus corpus.jsonl [--passes N]");
  process.exit(2);
}

const req = createRequire(path.join(process.cwd(), "noop.js"));
const modPath = req.resolve("@huggingface/tokenizers");
const mod = await import(modPath);
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(modPath), "..", "package.json"), "utf8")).version;

const tokJSON = JSON.parse(fs.readFileSync(path.join(a.tokenizer, "tokenizer.json"), "utf8"));
const cfgPath = path.join(a.tokenizer, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tokJSON, cfg);
const texts = fs.readFileSync(a.corpus, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l).text);
const enc = new TextEncoder();
const bytes = texts.reduce((n, t) => n + enc.encode(t).length, 0);

function pass(clear) {
  if (clear) tok.model.cache?.clear();
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const t of texts) n += tok.encode(t).ids.length;
  return [Number(process.hrtime.bigint() - t0) / 1e9, n];
}

const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const report = {};
for (const [name, clear] of [["warm", false], ["cold", true]]) {
  pass(clear);
  const rates = [];
  let ids = 0;
  for (let i = 0; i < Number(a.passes); i++) {
    const [s, n] = pass(clear);
    rates.push(bytes / s / 1e6);
    ids = n;
  }
  report[name] = median(rates);
  console.log(`@huggingface/tokenizers ${version} node ${process.version}: encode ${name}: ${median(rates).toFixed(2)} MB/s (median of ${rates.length}; ${texts.length} texts, ${(bytes / 1e6).toFixed(2)} MB, ${ids} ids)`);
}
