#!/usr/bin/env python3
"""Tests of gpu_check_rows.py on made-up logs (no GPU, no gochat):
python3 scripts/gpu_check_rows_test.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_check_rows as rows  # noqa: E402

RECIPE = """description: x
steps:
  sft:
    data: [Dahoas/rm-static]
    # a comment
    max-seq-len: 512
  reward:
    max-seq-len: 512
  ppo:
    actor-lora-dim: 128
later:
  sft: {zero-stage: 0}
"""


def run(*args, files=None):
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for name, text in (files or {}).items():
            paths[name] = os.path.join(d, name)
            with open(paths[name], "w") as f:
                f.write(text)
        argv = [a.format(**paths) for a in args]
        p = subprocess.run([sys.executable, os.path.join(HERE, "gpu_check_rows.py")] + argv,
                           capture_output=True, text=True)
        return p.stdout.strip(), p.returncode


def jl(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


class RecipeTest(unittest.TestCase):
    def test_sets_replace_and_add(self):
        out = rows.shorten_recipe(RECIPE, {"sft": {"max-seq-len": "64", "max-steps": "2"}, "ppo": {"actor-lora-dim": "8"}})
        self.assertIn("    max-seq-len: 64\n    max-steps: 2\n  reward:", out)
        self.assertEqual(out.count("max-seq-len: 512"), 1)  # reward's is kept
        self.assertIn("    actor-lora-dim: 8\nlater:\n  sft: {zero-stage: 0}", out)
        self.assertIn("# a comment", out)

    def test_last_block_and_missing_step(self):
        out = rows.shorten_recipe("steps:\n  ppo:\n    a: 1\n", {"ppo": {"b": "2"}})
        self.assertEqual(out, "steps:\n  ppo:\n    a: 1\n    b: 2\n")
        with self.assertRaises(SystemExit):
            rows.shorten_recipe(RECIPE, {"critic": {"a": "1"}})


class PeakTest(unittest.TestCase):
    def test_table(self):
        os.environ.pop("GPU_PEAK_TFLOPS", None)
        self.assertEqual(rows.peak_tflops("NVIDIA H200")[0], 989.0)
        self.assertEqual(rows.peak_tflops("NVIDIA H100 PCIe")[0], 756.0)
        self.assertEqual(rows.peak_tflops("NVIDIA H100 80GB HBM3")[0], 989.0)
        self.assertIsNone(rows.peak_tflops("NVIDIA L4")[0])
        os.environ["GPU_PEAK_TFLOPS"] = "100"
        try:
            self.assertEqual(rows.peak_tflops("NVIDIA L4")[0], 100.0)
        finally:
            del os.environ["GPU_PEAK_TFLOPS"]


class VerdictTest(unittest.TestCase):
    def test_train_bench(self):
        g = jl({"model": "opt-125m", "params": 125239296, "batch": 16, "seq": 512, "tokens_per_sec": 300000.0, "device_peak_bytes": 1})
        t = jl({"model": "opt-125m", "attn": "eager", "params": 125239296, "tokens_per_sec": 200000.0},
               {"model": "opt-125m", "attn": "sdpa", "params": 125239296, "tokens_per_sec": 400000.0})
        out, _ = run("train-bench", "--gpu", "NVIDIA H200", "--models", "opt-125m", "--gochat", "{g}", "--torch", "{t}",
                     files={"g": g, "t": t})
        self.assertTrue(out.startswith("PASS\t"), out)
        self.assertIn("MFU 22.8%", out)
        slow = g.replace("300000.0", "100000.0")
        out, _ = run("train-bench", "--gpu", "NVIDIA H200", "--models", "opt-125m", "--gochat", "{g}", "--torch", "{t}",
                     files={"g": slow, "t": t})
        self.assertTrue(out.startswith("FAIL\t"), out)
        out, _ = run("train-bench", "--models", "opt-125m,opt-1.3b", "--gochat", "{g}", "--torch", "{t}", files={"g": g, "t": t})
        self.assertTrue(out.startswith("FAIL\t") and "opt-1.3b: gochat missing" in out, out)

    def test_decode_bench(self):
        g = [jl({"model": "opt-125m", "batch": b, "prompt": 128, "new": 128, "dtype": "bf16", "tokens_per_sec": 500.0 * b,
                 "decode_tokens_per_sec": 600.0 * b}) for b in (1, 16)]
        h = jl({"batch": 1, "tokens_per_sec": 100.0, "attn": "sdpa"}, {"batch": 16, "tokens_per_sec": 9000.0, "attn": "sdpa"})
        out, _ = run("decode-bench", "--gochat", "{g1}", "{g16}", "--hf", "{h}", files={"g1": g[0], "g16": g[1], "h": h})
        self.assertTrue(out.startswith("FAIL\t") and "batch 16: gochat 8000 tok/s vs generate 9000" in out, out)

    def test_rlhf_run(self):
        log = jl({"time": "2026-11-28T10:00:00Z", "message": "device: cuda:0"},
                 {"time": "2026-11-28T10:00:30Z", "step": "step 1 (sft)", "device_peak_bytes": 2**33,
                  "device_reserved_peak_bytes": 2**33, "message": "memory: device peak 8 GiB"},
                 {"time": "2026-11-28T10:00:30Z", "step": 1, "elapsed_seconds": 30.0, "message": "step done"},
                 {"time": "2026-11-28T10:00:50Z", "step": "step 2 (reward)", "device_peak_bytes": 2**32,
                  "device_reserved_peak_bytes": 2**32, "message": "memory: device peak 4 GiB"},
                 {"time": "2026-11-28T10:00:50Z", "step": 2, "elapsed_seconds": 20.0, "message": "step done"},
                 {"time": "2026-11-28T10:01:40Z", "step": "step 3 (ppo)", "device_peak_bytes": 2**34,
                  "device_reserved_peak_bytes": 2**34, "message": "memory: device peak 16 GiB"},
                 {"time": "2026-11-28T10:01:40Z", "step": 3, "elapsed_seconds": 50.0, "message": "step done"})
        t0 = rows.parse_time("2026-11-28T10:00:00Z")
        smi = "%f 8000\n%f 4500\n%f 40000\n" % (t0 + 10, t0 + 40, t0 + 70)  # MiB
        out, _ = run("rlhf-run", "--log", "{log}", "--smi", "{smi}", "--rc", "0", files={"log": log, "smi": smi})
        self.assertTrue(out.startswith("PASS\t"), out)
        self.assertIn("step 3 50s, peak 16.0 GiB (held 16.0 GiB, nvidia-smi 39.1 GiB) [nvidia-smi 23.1 GiB over the allocator]", out)
        self.assertNotIn("step 1 30s, peak 8.0 GiB (held 8.0 GiB, nvidia-smi 7.8 GiB) [", out)
        cut = "".join(l + "\n" for l in log.splitlines()[:3]) + '{"level":"error","error":"boom","message":"x"}\n'
        out, _ = run("rlhf-run", "--log", "{log}", "--rc", "1", files={"log": cut})
        self.assertTrue(out.startswith("FAIL\t") and "steps done [1]" in out and "boom" in out, out)

    def test_offload(self):
        refused = jl({"message": "memory plan: x", "estimated_peak_bytes": 24 << 30}) + \
            "gochat: step 1 (sft) does not fit in GPU memory: GPU cuda:0 ...\n"
        oom = "gochat: step 1: cuda:0 (NVIDIA H200): out of memory: a buffer of 9.80 GiB on top of 9 GiB live exceeds the limit of 16.00 GiB\n"
        ran = jl({"message": "memory plan: y", "estimated_peak_bytes": 11 << 30, "host_state_bytes": 21 << 30},
                 {"step": 1, "loss": 10.9, "message": "train"}, {"step": 2, "loss": 10.8, "message": "train"},
                 {"step": "step 1 (sft)", "device_peak_bytes": 10 << 30, "message": "memory: device peak 10 GiB"})
        args = ["offload", "--limit", str(16 << 30), "--refused", "{r}", "--rc-refused", "2", "--oom", "{o}", "--rc-oom", "1",
                "--ran", "{c}", "--rc-ran", "0"]
        out, _ = run(*args, files={"r": refused, "o": oom, "c": ran})
        self.assertTrue(out.startswith("PASS\t") and "2 steps, device peak 10.0 GiB" in out, out)
        out, _ = run(*args, files={"r": ran, "o": oom, "c": ran})  # not refused
        self.assertTrue(out.startswith("FAIL\t") and "NOT refused" in out, out)
        args[args.index("--rc-oom") + 1] = "0"
        out, _ = run(*args, files={"r": refused, "o": ran, "c": ran})  # did not run out of memory
        self.assertTrue(out.startswith("FAIL\t") and "NOT out of memory" in out, out)


if __name__ == "__main__":
    unittest.main()
