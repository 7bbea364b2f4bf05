#!/usr/bin/env python3
"""Check that a model directory gochat saved loads in Hugging Face
transformers and computes what gochat computed.

    hf_check.py causal DIR GOCHAT_JSON      # gochat generate --greedy --json output
    hf_check.py reward DIR IDS SCORE        # a reward model's score of one sequence

causal: transformers' AutoModelForCausalLM greedily continues the same
prompt ids; the tokens must be equal and each token's log-probability
(log-softmax of the logits, fp32) within --tol of gochat's.
reward: AutoModelForSequenceClassification scores the ids (num_labels 1,
the value at the last token); it must be within --tol of SCORE.
Either way the checkpoint must load cleanly: no tensor missing (which
transformers would initialise at random), unexpected or of another shape.

Prints one line, "PASS ..." or "FAIL ...", and exits 0 or 1. Run with the
Python that has torch and transformers (the GPU machine's; see
scripts/gpu-check.sh). Independent of gochat: only transformers' code
computes here.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["causal", "reward"])
    ap.add_argument("dir")
    ap.add_argument("rest", nargs="+")
    ap.add_argument("--tol", type=float, default=2e-3)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    import torch
    import transformers

    dev = a.device if torch.cuda.is_available() or a.device == "cpu" else "cpu"
    if a.kind == "causal":
        g = json.load(open(a.rest[0]))
        prompt, want, want_lp = g["prompt_ids"], g["tokens"], g["logprobs"]
        m = load(transformers.AutoModelForCausalLM, a.dir, torch)
        if isinstance(m, str):
            print("FAIL causal %s: %s" % (a.dir, m))
            return 1
        m = m.to(dev).eval()
        ids = torch.tensor([prompt], device=dev)
        got, lps = [], []
        with torch.no_grad():
            for _ in range(len(want)):
                logits = m(ids).logits[0, -1].float()
                lp = torch.log_softmax(logits, -1)
                t = int(torch.argmax(logits))
                got.append(t)
                lps.append(float(lp[t]))
                ids = torch.cat([ids, torch.tensor([[t]], device=dev)], 1)
                if t in as_list(m.config.eos_token_id):
                    break
        worst = max((abs(x - y) for x, y in zip(lps, want_lp)), default=0.0)
        ok = got == want and worst <= a.tol
        print("%s causal %s (%s): %d tokens %s, largest log-prob difference %.2e" % (
            "PASS" if ok else "FAIL", a.dir, m.config.model_type, len(want), "equal" if got == want else "DIFFER %s vs %s" % (got, want), worst))
        return 0 if ok else 1
    ids, score = [int(x) for x in a.rest[0].split(",")], float(a.rest[1])
    m = load(transformers.AutoModelForSequenceClassification, a.dir, torch)
    if isinstance(m, str):
        print("FAIL reward %s: %s" % (a.dir, m))
        return 1
    m = m.to(dev).eval()
    with torch.no_grad():
        got = float(m(torch.tensor([ids], device=dev)).logits[0, 0])
    ok = m.config.num_labels == 1 and abs(got - score) <= a.tol * max(1.0, abs(score))
    print("%s reward %s (%s): transformers %.5f, gochat %.5f" % ("PASS" if ok else "FAIL", a.dir, m.config.model_type, got, score))
    return 0 if ok else 1


def load(auto, path, torch):
    """The model in fp32, or a string naming the tensors transformers found
    missing, unexpected or of another shape (it would initialise or drop
    them silently)."""
    m, info = auto.from_pretrained(path, output_loading_info=True)
    bad = ["%d %s (%s%s)" % (len(v), k.replace("_keys", ""), ", ".join(map(str, sorted(v)[:3])), ", ..." if len(v) > 3 else "")
           for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v]
    return "%s does not load cleanly: %s" % (auto.__name__, "; ".join(bad)) if bad else m.float()


def as_list(x):
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


if __name__ == "__main__":
    sys.exit(main())
