#!/usr/bin/python3
"""Golden dumps for gochat's LLaMA-family models, computed with PyTorch.

Run by hand (not by CI) with Debian's PyTorch (1.13; transformers is not
needed and not installed):
    /usr/bin/python3 scripts/llama_golden.py

The forward below is an independent re-implementation of transformers'
LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM (modeling_llama.py
@5dd4a635, modeling_qwen2.py @63bb7237, modeling_qwen3.py @9ee3f431;
modeling_rope_utils.py @ef468064 for the rotary frequencies), eager
attention, following the code quoted in ../shared/notes/llama-family.md §1:
LlamaRMSNorm (fp32, cast back before the weight), rotate_half RoPE with cos
and sin computed in fp32 from inv_freq (default and llama3), repeat_kv GQA,
softmax in fp32, SwiGLU MLP, Qwen2's q/k/v biases, Qwen3's q_norm/k_norm
before RoPE, position ids from the attention mask as generate computes them
(cumsum(mask) - 1, masked_fill(mask == 0, 1)), tied or untied lm_head.
The exact answers are computed in float64 from the float32 weights.

It writes, under model/testdata/llama/:
  <case>/config.json, model.safetensors      a tiny model with transformers' names
  <case>/{left,right}.safetensors            inputs; logits, loss, every parameter
                                             gradient, values (value head), a
                                             10-step AdamW loss trajectory
  <case>/generate.safetensors                left-padded prompts and the greedy
                                             continuation of a full-recompute loop
  <case>/bf16.safetensors                    torch.autocast(bfloat16) and exact
                                             answers for the bf16-rounded weights
  formats/...                                one tiny Qwen2 in the other layouts
                                             (sharded bf16, fp16, DeepSpeed-Chat
                                             reward names with v_head) and its logits
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_model_golden import write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "testdata", "llama")

NO_DECAY = ["bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight"]  # optim.NoDecay

# --------------------------------------------------------------------------
# The configurations (config.json as transformers writes them).

LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64},
    "attention_bias": True, "mlp_bias": True, "hidden_act": "silu", "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": [2, 5], "pad_token_id": 0, "attention_dropout": 0.0, "torch_dtype": "float32",
}
QWEN2 = {
    "model_type": "qwen2", "architectures": ["Qwen2ForSequenceClassification"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
    "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 64,
    "max_window_layers": 2, "bos_token_id": 3, "eos_token_id": 4, "attention_dropout": 0.0,
    "num_labels": 1, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "torch_dtype": "float32",
}
QWEN3 = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_scaling": None, "attention_bias": False, "hidden_act": "silu", "tie_word_embeddings": True,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
    "bos_token_id": 3, "eos_token_id": 4, "pad_token_id": 0, "attention_dropout": 0.0, "torch_dtype": "float32",
}


def dims(cfg):
    H, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or NH
    HS = cfg.get("head_dim") or H // NH
    return H, NH, NKV, HS, cfg["intermediate_size"], cfg["vocab_size"]


def biases(cfg):
    """(q/k/v bias, o_proj bias, mlp bias) as each family's modules have them."""
    t = cfg["model_type"]
    if t == "qwen2":
        return True, False, False
    ab = cfg.get("attention_bias", False)
    return ab, ab, cfg.get("mlp_bias", False) if t == "llama" else False


def param_shapes(cfg, value_head):
    """transformers' state_dict names (without the "model." prefix) and shapes."""
    H, NH, NKV, HS, F, V = dims(cfg)
    qkvb, ob, mb = biases(cfg)
    s = {"embed_tokens.weight": (V, H)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        s[p + "input_layernorm.weight"] = (H,)
        s[p + "post_attention_layernorm.weight"] = (H,)
        for n, o in (("q_proj", NH * HS), ("k_proj", NKV * HS), ("v_proj", NKV * HS)):
            s[p + f"self_attn.{n}.weight"] = (o, H)
            if qkvb:
                s[p + f"self_attn.{n}.bias"] = (o,)
        s[p + "self_attn.o_proj.weight"] = (H, NH * HS)
        if ob:
            s[p + "self_attn.o_proj.bias"] = (H,)
        if cfg["model_type"] == "qwen3":
            s[p + "self_attn.q_norm.weight"] = (HS,)
            s[p + "self_attn.k_norm.weight"] = (HS,)
        for n, shape in (("gate_proj", (F, H)), ("up_proj", (F, H)), ("down_proj", (H, F))):
            s[p + f"mlp.{n}.weight"] = shape
            if mb:
                s[p + f"mlp.{n}.bias"] = shape[:1]
    s["norm.weight"] = (H,)
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, H)
    if value_head:
        s["v_head.weight"] = (1, H)
    return s


def init_params(cfg, gen, value_head):
    ps = {}
    for name, shape in param_shapes(cfg, value_head).items():
        if name.endswith("norm.weight"):
            t = 1 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        elif "embed" in name:
            t = 0.5 * torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / shape[-1] ** 0.5
        ps[name] = t.float()
    return ps


def hf_state_dict(ps):
    """The names transformers saves: model.* for the decoder, lm_head.weight,
    and score.weight for XForSequenceClassification's head."""
    out = {}
    for k, v in ps.items():
        if k == "v_head.weight":
            out["score.weight"] = v
        elif k == "lm_head.weight":
            out[k] = v
        else:
            out["model." + k] = v
    return out


# --------------------------------------------------------------------------
# modeling_rope_utils: _compute_default_rope_parameters, _compute_llama3_parameters

def rope_inv_freq(cfg):
    _, _, _, HS, _, _ = dims(cfg)
    base, dim = cfg["rope_theta"], HS
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        return inv_freq / rs["factor"]
    assert kind == "llama3", kind
    factor = rs["factor"]
    low_freq_factor = rs["low_freq_factor"]
    high_freq_factor = rs["high_freq_factor"]
    old_context_len = rs["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotary(cfg, position_ids, dtype):
    """LlamaRotaryEmbedding.forward: fp32 with autocast disabled, then cast."""
    inv_freq = rope_inv_freq(cfg)
    with torch.autocast("cpu", enabled=False):
        inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()  # attention_scaling 1 for default and llama3
    return cos.to(dtype), sin.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def rms_norm(x, w, eps):
    """LlamaRMSNorm. In float64 (the exact reference) it stays float64."""
    input_dtype = x.dtype
    h = x if x.dtype == torch.float64 else x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return w * h.to(input_dtype)


def repeat_kv(x, n_rep):
    b, nkv, t, hs = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, nkv, n_rep, t, hs).reshape(b, nkv * n_rep, t, hs)


def linear(x, p, name):
    y = x @ p[name + ".weight"].T
    if name + ".bias" in p:
        y = y + p[name + ".bias"]
    return y


def position_ids_from_mask(mask):
    pos = mask.long().cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    return pos


def llama_forward(cfg, p, ids, mask):
    """Returns (final hidden states [B,T,H], logits [B,T,V])."""
    H, NH, NKV, HS, F, V = dims(cfg)
    B, T = ids.shape
    eps = cfg["rms_norm_eps"]
    dt = p["embed_tokens.weight"].dtype
    h = p["embed_tokens.weight"][ids]
    pos = position_ids_from_mask(mask)
    cos, sin = rotary(cfg, pos, h.dtype)

    # _prepare_4d_causal_attention_mask_with_cache_position (eager): the most
    # negative value at future and padded keys. Writing it in place of the
    # masked scores computes what adding it does (the scores are absorbed),
    # with the derivative of that function (see gen_model_golden.py).
    minv = torch.finfo(dt).min
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    masked = causal[None, None] | (mask[:, None, None, :] == 0)

    for l in range(cfg["num_hidden_layers"]):
        q_ = lambda n: f"layers.{l}.{n}"
        residual = h
        x = rms_norm(h, p[q_("input_layernorm.weight")], eps)
        q = linear(x, p, q_("self_attn.q_proj")).view(B, T, NH, HS)
        k = linear(x, p, q_("self_attn.k_proj")).view(B, T, NKV, HS)
        v = linear(x, p, q_("self_attn.v_proj")).view(B, T, NKV, HS).transpose(1, 2)
        if cfg["model_type"] == "qwen3":
            q = rms_norm(q, p[q_("self_attn.q_norm.weight")], eps)
            k = rms_norm(k, p[q_("self_attn.k_norm.weight")], eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
        w = ((q @ k.transpose(2, 3)) * HS ** -0.5).to(dt)  # bf16 under autocast; + the mask in dt
        w = torch.where(masked, torch.full_like(w, minv), w)
        w = torch.softmax(w, dim=-1, dtype=torch.float32 if w.dtype != torch.float64 else torch.float64).to(q.dtype)
        o = (w @ v).transpose(1, 2).reshape(B, T, NH * HS)
        h = residual + linear(o, p, q_("self_attn.o_proj"))
        residual = h
        x = rms_norm(h, p[q_("post_attention_layernorm.weight")], eps)
        g = linear(x, p, q_("mlp.gate_proj"))
        u = linear(x, p, q_("mlp.up_proj"))
        h = residual + linear(torch.nn.functional.silu(g) * u, p, q_("mlp.down_proj"))
    h = rms_norm(h, p["norm.weight"], eps)
    head = p["embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return h, h @ head.T


def ce_loss(logits, targets):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)


def make_batch(gen, V, B, T, side, pad_id):
    lens = [T, T - 3, T - 1][:B]
    ids = torch.randint(6, V, (B, T), generator=gen)
    mask = torch.zeros(B, T, dtype=torch.int64)
    for b, n in enumerate(lens):
        if side == "left":
            mask[b, T - n:] = 1
        else:
            mask[b, :n] = 1
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad_id))
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    targets = torch.full_like(labels, -100)
    targets[:, :-1] = labels[:, 1:]
    return ids, mask, targets


def pad_id(cfg):
    if cfg.get("pad_token_id") is not None:
        return cfg["pad_token_id"]
    e = cfg.get("eos_token_id")
    return e[0] if isinstance(e, list) else e


def eos_ids(cfg):
    e = cfg["eos_token_id"]
    return e if isinstance(e, list) else [e]


def adamw_losses(cfg, params32, ids, mask, targets, steps=10):
    """torch.optim.AdamW with gochat's groups: weight decay 0.1 except for
    optim.NoDecay names."""
    p = {k: v.double().requires_grad_() for k, v in params32.items()}
    decay = [v for k, v in p.items() if not any(s in k for s in NO_DECAY)]
    nodecay = [v for k, v in p.items() if any(s in k for s in NO_DECAY)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, logits = llama_forward(cfg, p, ids, mask)
        loss = ce_loss(logits, targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return torch.tensor(losses, dtype=torch.float32)


def greedy(cfg, params32, gen, B=3, T0=5, new=6):
    """Greedy continuation of left-padded prompts by a full forward per step
    (no cache), positions from the mask; rows end at an EOS id (then -1)."""
    p = {k: v.double() for k, v in params32.items()}
    lens = [T0, T0 - 2, 1][:B]
    ids = torch.randint(6, cfg["vocab_size"], (B, T0), generator=gen)
    mask = torch.zeros(B, T0, dtype=torch.int64)
    for b, n in enumerate(lens):
        mask[b, T0 - n:] = 1
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad_id(cfg)))
    seq, m = ids.clone(), mask.clone()
    out = torch.full((B, new), -1, dtype=torch.int64)
    done = [False] * B
    min_gap = float("inf")
    with torch.no_grad():
        for s in range(new):
            _, logits = llama_forward(cfg, p, seq, m)
            last = logits[:, -1]
            top2 = last.topk(2, dim=-1).values
            nxt = last.argmax(-1)
            for b in range(B):
                if not done[b]:
                    min_gap = min(min_gap, (top2[b, 0] - top2[b, 1]).item())
                    out[b, s] = nxt[b]
                    done[b] = nxt[b].item() in eos_ids(cfg)
            seq = torch.cat([seq, nxt[:, None]], 1)
            m = torch.cat([m, torch.ones(B, 1, dtype=torch.int64)], 1)
    return {"gen_ids": ids, "gen_mask": mask, "gen_tokens": out, "gen_min_gap": torch.tensor([min_gap])}


def golden_case(name, cfg, value_head, seed):
    gen = torch.Generator().manual_seed(seed)
    params32 = init_params(cfg, gen, value_head)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(d, "model.safetensors"), hf_state_dict(params32), {"format": "pt"})
    for side in ("left", "right"):
        ids, mask, targets = make_batch(gen, cfg["vocab_size"], 3, 8, side, pad_id(cfg))
        p = {k: v.double().requires_grad_() for k, v in params32.items()}
        y, logits = llama_forward(cfg, p, ids, mask)
        loss = ce_loss(logits, targets)
        obj = loss
        out = {"ids": ids, "mask": mask, "targets": targets,
               "logits": logits.detach().float(), "loss": loss.detach().float().reshape(1)}
        if value_head:
            values = (y @ p["v_head.weight"].T)[..., 0]
            dvalues = torch.randn(values.shape, generator=gen, dtype=torch.float64) * mask
            obj = loss + (values * dvalues).sum()
            out["values"] = values.detach().float()
            out["dvalues"] = dvalues.float()
        obj.backward()
        for k, v in p.items():
            out["grad." + k] = v.grad.float()
        out["adamw_losses"] = adamw_losses(cfg, params32, ids, mask, targets)
        write_safetensors(os.path.join(d, side + ".safetensors"), out)
        print(name, side, "loss", out["loss"].item(), "adamw", out["adamw_losses"][0].item(), "->",
              out["adamw_losses"][-1].item())
    g = greedy(cfg, params32, gen)
    write_safetensors(os.path.join(d, "generate.safetensors"), g)
    print(name, "greedy", g["gen_tokens"].tolist(), "min top-2 gap", g["gen_min_gap"].item())
    bf16_case(d, cfg, params32, value_head, seed)


def bf16_case(d, cfg, params32, value_head, seed):
    """As gen_bf16_golden.py for OPT: the weights rounded to bf16, the float32
    forward under torch.autocast(bfloat16) and the exact float64 forward."""
    pb = {k: v.to(torch.bfloat16).float() for k, v in params32.items()}
    bgen = torch.Generator().manual_seed(1000 + seed)
    ids, mask, targets = make_batch(bgen, cfg["vocab_size"], 3, 8, "left", pad_id(cfg))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, logits = llama_forward(cfg, pb, ids, mask)
        logits = logits.float()
        loss = ce_loss(logits, targets)
    with torch.no_grad():
        _, exact = llama_forward(cfg, {k: v.double() for k, v in pb.items()}, ids, mask)
        loss_exact = ce_loss(exact, targets)
    out = {"ids": ids, "mask": mask, "targets": targets,
           "logits_bf16": logits.float(), "loss_bf16": loss.float().reshape(1),
           "logits_exact": exact.float(), "loss_exact": loss_exact.float().reshape(1)}
    dvalues = torch.randn(ids.shape, generator=bgen, dtype=torch.float64) * mask
    if value_head:
        out["dvalues"] = dvalues.float()
    for kind in ("bf16", "exact"):
        if kind == "bf16":
            p = {k: v.clone().requires_grad_() for k, v in pb.items()}
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, lg = llama_forward(cfg, p, ids, mask)
                obj = ce_loss(lg.float(), targets)
                if value_head:
                    obj = obj + ((y @ p["v_head.weight"].T)[..., 0].float() * dvalues.float()).sum()
        else:
            p = {k: v.double().requires_grad_() for k, v in pb.items()}
            y, lg = llama_forward(cfg, p, ids, mask)
            obj = ce_loss(lg, targets)
            if value_head:
                obj = obj + ((y @ p["v_head.weight"].T)[..., 0] * dvalues).sum()
        obj.backward()
        for k, v in p.items():
            out[f"grad_{kind}." + k] = v.grad.float()
    write_safetensors(os.path.join(d, "bf16.safetensors"), out)
    err = (logits.double() - exact).abs().max().item()
    print(os.path.basename(d), "bf16: loss", loss.item(), "exact", loss_exact.item(), "max |logit err| of torch bf16", err)


def round_to_bf16_and_fp16(t):
    t = t.to(torch.bfloat16).float()
    return torch.where(t.abs() < 2 ** -14, torch.zeros_like(t), t)


def formats():
    """The tiny Qwen2 (with a value head) with weights exactly representable
    in bf16 and fp16, in the layouts the loader must read."""
    cfg = dict(QWEN2)
    gen = torch.Generator().manual_seed(7)
    ps = {k: round_to_bf16_and_fp16(v) for k, v in init_params(cfg, gen, True).items()}
    assert all(torch.equal(v.half().float(), v) for v in ps.values())
    root = os.path.join(OUT, "formats")

    def put(sub, cfg_=cfg):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg_, f, indent=2, sort_keys=True)
        return d

    full = hf_state_dict(ps)
    write_safetensors(os.path.join(put("fp16"), "model.safetensors"), {k: v.half() for k, v in full.items()},
                      {"format": "pt"})
    # Sharded bf16 safetensors: two shards and an index.
    d = put("sharded_bf16")
    names = sorted(full)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    wm = {}
    for fn, ns in shards.items():
        write_safetensors(os.path.join(d, fn), {n: full[n].bfloat16() for n in ns}, {"format": "pt"})
        wm.update({n: fn for n in ns})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 2 for v in full.values())}, "weight_map": wm}, f, indent=2)
    # DeepSpeed-Chat's reward model: rwtransformer.* (over Qwen2Model) and v_head.weight,
    # plus an old conversion's rotary_emb.inv_freq buffer to be ignored.
    rw = {("rwtransformer." + k if k != "v_head.weight" else k): v for k, v in ps.items()}
    rw["rwtransformer.layers.0.self_attn.rotary_emb.inv_freq"] = rope_inv_freq(cfg)
    write_safetensors(os.path.join(put("dschat_reward", dict(cfg, architectures=["Qwen2ForCausalLM"])),
                                   "model.safetensors"), rw)

    ids, mask, _ = make_batch(gen, cfg["vocab_size"], 3, 8, "left", pad_id(cfg))
    p = {k: v.double() for k, v in ps.items()}
    y, logits = llama_forward(cfg, p, ids, mask)
    write_safetensors(os.path.join(root, "expected.safetensors"),
                      {"ids": ids, "mask": mask, "logits": logits.float(),
                       "values": (y @ p["v_head.weight"].T)[..., 0].float()})
    print("formats: written")


if __name__ == "__main__":
    torch.manual_seed(0)
    golden_case("llama", LLAMA, False, 11)
    golden_case("qwen2", QWEN2, True, 12)
    golden_case("qwen3", QWEN3, False, 13)
    formats()
