#!/usr/bin/env python3
"""Hugging Face transformers' `generate`, timed: the reference for
`gochat bench decode` (scripts/gpu-check.sh, row decode-bench).

    python3 scripts/bench_hf_generate.py --model opt-125m --batch 1,16 --prompt 128 --new 128 \
        --runs 5 --device cuda --dtype bf16

A randomly initialised OPTForCausalLM of the named OPT configuration (built
from the configuration written out here: no download) in --dtype on
--device continues a random prompt of --prompt tokens (ids 3.., no padding,
attention mask all ones) greedily (do_sample False, one beam, use_cache)
for exactly --new tokens: min_new_tokens = max_new_tokens, so an
end-of-sequence token does not stop a row early and every batch row
produces --new tokens, as gochat's benchmark does. Each batch size gets one
warm-up call and --runs timed calls (synchronized), and prints one JSON
object: {"model", "params", "batch", "prompt", "new", "dtype", "device",
"attn", "tokens_per_sec" (batch x new / median seconds of a whole generate
call, prefill included), "seconds", "device_peak_bytes", "gpu",
"transformers", "torch"}.
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, OPTConfig

PRESETS = {  # hidden, ffn, layers, heads, word_embed_proj_dim, pre-LN
    "opt-125m": (768, 3072, 12, 12, 768, True),
    "opt-350m": (1024, 4096, 24, 16, 512, False),
    "opt-1.3b": (2048, 8192, 24, 32, 2048, True),
}


def config(name):
    h, f, l, nh, p, pre = PRESETS[name]
    return OPTConfig(vocab_size=50272, hidden_size=h, ffn_dim=f, num_hidden_layers=l, num_attention_heads=nh,
                     word_embed_proj_dim=p, do_layer_norm_before=pre, max_position_embeddings=2048,
                     activation_function="relu", dropout=0.1, attention_dropout=0.0, enable_bias=True,
                     pad_token_id=1, bos_token_id=2, eos_token_id=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="opt-125m", choices=sorted(PRESETS))
    ap.add_argument("--batch", default="1", help="batch sizes, comma-separated")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--attn", default="", help="attn_implementation (eager, sdpa; default: transformers' choice)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    kw = {"attn_implementation": a.attn} if a.attn else {}
    # Built in fp32 and converted: from_config's dtype keyword changed name
    # between transformers versions.
    m = AutoModelForCausalLM.from_config(config(a.model), **kw).to(device=dev, dtype=dtype).eval()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for b in (int(x) for x in a.batch.split(",")):
        ids = torch.randint(3, 50272, (b, a.prompt), device=dev)
        mask = torch.ones_like(ids)

        def gen():
            with torch.inference_mode():
                return m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.new, min_new_tokens=a.new,
                                  do_sample=False, num_beams=1, use_cache=True, pad_token_id=1, eos_token_id=2)

        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        out = gen()  # warm-up
        sync()
        if tuple(out.shape) != (b, a.prompt + a.new):
            raise SystemExit("generate returned %s, want (%d, %d)" % (tuple(out.shape), b, a.prompt + a.new))
        secs = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            gen()
            sync()
            secs.append(time.perf_counter() - t0)
        med = statistics.median(secs)
        res = {"model": a.model, "params": sum(p.numel() for p in m.parameters()), "batch": b, "prompt": a.prompt,
               "new": a.new, "dtype": a.dtype, "device": a.device,
               "attn": getattr(m.config, "_attn_implementation", "?"),
               "tokens_per_sec": round(b * a.new / med, 2), "seconds": round(med, 4),
               "transformers": transformers.__version__, "torch": torch.__version__}
        if cuda:
            res["device_peak_bytes"] = torch.cuda.max_memory_allocated(dev)
            res["gpu"] = torch.cuda.get_device_name(dev)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
