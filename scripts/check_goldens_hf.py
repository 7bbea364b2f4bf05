#!/usr/bin/env python3
"""Check the model golden files against Hugging Face transformers.

scripts/llama_golden.py computes model/testdata/llama/<case>/ (Llama,
Qwen2, Qwen3) and scripts/gen_model_golden.py model/testdata/golden/<case>/
(OPT pre-LN and post-LN) with their own re-implementations of
transformers' forward (they need PyTorch only), and gochat's tests compare
with those files. This script recomputes them with
transformers itself, in float64 (eager attention, position ids from the
attention mask as generate computes them), from the same config.json and
model.safetensors, and reports the largest differences: logits and loss on
both padding sides, the value head's outputs, and every parameter's
gradient of loss + Σ values·dvalues (the golden objective).

    python3 scripts/check_goldens_hf.py [--tol 2e-6]

The golden tensors are stored in float32, and transformers computes the
rotary cos/sin and the attention softmax in float32 even in a float64
model, so agreement is at float32 level: --tol (default 2e-6) relative to
each tensor's largest magnitude.

The left-padded batch has query rows whose keys are all masked. There
transformers' eager attention adds the mask's most negative value to the
scores, where the golden and gochat write it in place (README: "Two
deliberate differences"). The forward is the same (a uniform row), but
adding passes gradient through that row's softmax to its q and to every k.
In float64 it also overflows to -inf in the float32 softmax and gives NaN.
So the left side runs transformers with its eager attention function
replaced by the same function with the masked value written in place
(in_place_mask_attention below), and that is the only change. Reported, not
checked:
  - k_proj.bias, whose gradient is zero in exact arithmetic (softmax
    ignores a per-row shift): both sides hold rounding noise;
  - the pad_token_id row of embed_tokens' gradient: transformers builds
    the embedding as nn.Embedding(padding_idx=pad_token_id), which passes
    no gradient to that row from the lookups, where the golden and gochat
    do. In training it matters only when the pad id also stands at real
    positions (a pad token that is also an end-of-text token).

Needs torch and transformers (Debian sid's python3-transformers; see the
README's "Checks against transformers"). Exits 1 when a checked quantity is
off by more than --tol (relative to the largest magnitude of the golden
tensor).
"""
import argparse
import json
import os
import sys

import torch

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "testdata")
CASES = [("llama", "llama/llama"), ("qwen2", "llama/qwen2"), ("qwen3", "llama/qwen3"),
         ("opt-preln", "golden/preln"), ("opt-postln", "golden/postln")]


def load_st(path):
    from safetensors.torch import load_file
    return load_file(path)


def relative(got, want, scale):
    """The largest |got - want| over the largest |scale|; NaN counts as
    infinitely far (a failure, not a pass)."""
    err = float((got - want).abs().max() / max(scale.abs().max().item(), 1e-30))
    return float("inf") if err != err else err


def in_place_mask_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager_attention_forward (modeling_llama.py) with the
    masked scores replaced by float32's most negative value instead of
    having the mask added."""
    from transformers.models.llama.modeling_llama import repeat_kv
    groups = getattr(module, "num_key_value_groups", 1)
    k, v = repeat_kv(key, groups), repeat_kv(value, groups)
    w = torch.matmul(query, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        m = attention_mask[:, :, :, : k.shape[-2]]
        masked = ~m if m.dtype == torch.bool else m < 0
        w = torch.where(masked, torch.full_like(w, torch.finfo(torch.float32).min), w)
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tol", type=float, default=2e-6)
    a = ap.parse_args()
    import transformers
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3
    from transformers.models.opt import modeling_opt
    modules = (modeling_llama, modeling_qwen2, modeling_qwen3, modeling_opt)
    eager = {mod: mod.eager_attention_forward for mod in modules}

    fails = []
    for case, sub in CASES:
        d = os.path.join(TESTDATA, sub)
        opt = case.startswith("opt")
        cfg = json.load(open(os.path.join(d, "config.json")))
        weights = load_st(os.path.join(d, "model.safetensors"))
        for side in ("left", "right"):
            g = load_st(os.path.join(d, side + ".safetensors"))
            for mod in modules:
                mod.eager_attention_forward = in_place_mask_attention if side == "left" else eager[mod]
            m = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager").double()
            m.train(False)
            head = next((weights[k] for k in ("score.weight", "v_head.weight") if k in weights), None)
            score = head.detach().double().requires_grad_() if head is not None else None
            ids, mask, targets = g["ids"], g["mask"], g["targets"]
            pos = mask.long().cumsum(-1) - 1
            pos.masked_fill_(mask == 0, 1)
            # OPT computes its positions from the mask itself (the same formula, offset 2).
            out = m(input_ids=ids, attention_mask=mask, position_ids=None if opt else pos, output_hidden_states=True)
            logits = out.logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                     ignore_index=-100)
            obj = loss
            checks = [("logits", logits, g["logits"]), ("loss", loss.reshape(1), g["loss"])]
            if score is not None:
                values = (out.hidden_states[-1] @ score.T)[..., 0]
                obj = loss + (values * g["dvalues"].double()).sum()
                checks.append(("values", values, g["values"]))
            obj.backward()
            grads = {}
            for name, p in m.named_parameters():
                short = name
                for prefix in ("model.decoder.", "model."):
                    if short.startswith(prefix):
                        short = short[len(prefix):]
                        break
                grads[short] = p.grad
            if score is not None:
                grads["v_head.weight"] = score.grad
            for k in g:
                if not k.startswith("grad."):
                    continue
                short = k[len("grad."):]
                if short not in grads or grads[short] is None:
                    fails.append("%s/%s: transformers has no parameter for %s" % (case, side, k))
                    continue
                checks.append((k, grads[short], g[k]))
            pad, gworst, ngrad = cfg.get("pad_token_id"), 0.0, 0
            for what, got, want in checks:
                got, want = got.detach().double(), want.double()
                if what == "grad.embed_tokens.weight" and pad is not None:
                    perr = relative(got[pad], want[pad], want)
                    print("%-6s %-5s %-45s relative %.3g reported, not checked" % (case, side, "grad.embed_tokens.weight[pad row]", perr))
                    keep = torch.ones(got.shape[0], dtype=torch.bool)
                    keep[pad] = False
                    got, want = got[keep], want[keep]
                err = relative(got, want, want)
                unchecked = what.endswith("k_proj.bias")
                tag = "reported, not checked" if unchecked else ("ok" if err <= a.tol else "OFF")
                if not unchecked:
                    if what.startswith("grad."):
                        gworst, ngrad = max(gworst, err), ngrad + 1
                    if err > a.tol:
                        fails.append("%s/%s %s: %.3g" % (case, side, what, err))
                if what in ("logits", "loss", "values") or (err > a.tol and not unchecked):
                    print("%-6s %-5s %-45s relative %.3g %s" % (case, side, what, err, tag))
            print("%-6s %-5s %d gradients checked, largest relative difference %.3g" % (case, side, ngrad, gworst))
    print("%s: every checked quantity within %g, transformers %s, torch %s" % (
        "PASS" if not fails else "FAIL", a.tol, transformers.__version__, torch.__version__))
    for f in fails:
        print("  " + f)
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
