#!/usr/bin/python3
"""Golden answers for gochat's LLaMA-family kernels, computed with PyTorch.

Run by hand (not by CI) with Debian's PyTorch:
    /usr/bin/python3 scripts/llama_kernels_golden.py

It writes kernels/kerneltest/testdata/llama_kernels_golden.json, which
kerneltest embeds and checks every backend against (subtests Golden/...).

The reference semantics are written here independently of gochat, following
Hugging Face transformers' code (modeling_llama.py @5dd4a635, modeling_qwen3.py
@9ee3f431, modeling_rope_utils.py @ef468064; see shared/notes/llama-family.md
section 1): LlamaRMSNorm, the default/linear/llama3 inv_freq initialisers,
LlamaRotaryEmbedding.forward, rotate_half/apply_rotary_pos_emb, repeat_kv,
the eager attention with the additive causal+padding mask of
_update_causal_mask, and LlamaMLP's act_fn(gate_proj(x)) * up_proj(x).
Gradients are autograd's for L = sum(out * dout) with a random dout.

Every tensor is float32 and written as a flat list (row-major) of the exact
float32 values, each as the shortest decimal that reads back as it.

One deliberate difference: a query row whose keys are all padding (left
padding) gets the uniform distribution over the row in both, but autograd
pushes gradient through the absorbed scores to q and k, while gochat's
contract (kernels/doc.go) passes none (the output does not depend on them).
dout is zero on those rows, so the comparison is not affected.
"""
import json
import math
import os

import numpy
import torch
import torch.nn.functional as Fn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "kerneltest", "testdata",
                   "llama_kernels_golden.json")


def flat(t):
    # The shortest decimal that reads back as the same float32 (Go parses
    # it with strconv.ParseFloat(s, 32)).
    return [float(str(numpy.float32(v))) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


# ---- transformers semantics, re-implemented ----

def llama_rms_norm(hidden_states, weight, eps):
    """LlamaRMSNorm.forward (Qwen2RMSNorm and Qwen3RMSNorm are the same)."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def default_inv_freq(base, dim):
    """_compute_default_rope_parameters (partial_rotary_factor 1)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def linear_inv_freq(base, dim, factor):
    """_compute_linear_scaling_rope_parameters."""
    inv_freq = default_inv_freq(base, dim)
    inv_freq /= factor
    return inv_freq


def llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    """_compute_llama3_parameters."""
    inv_freq = default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotary_cos_sin(inv_freq, position_ids, attention_scaling=1.0):
    """LlamaRotaryEmbedding.forward: cos, sin [B, T, head_dim]."""
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def causal_mask_4d(attention_mask, T, dtype=torch.float32):
    """LlamaModel._update_causal_mask / _prepare_4d_causal_attention_mask_with_cache_position
    for eager attention without a cache: 0 where visible, finfo.min elsewhere."""
    B = attention_mask.shape[0]
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((T, T), fill_value=min_dtype, dtype=dtype)
    causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask = causal_mask[None, None, :, :].expand(B, 1, -1, -1).clone()
    padding_mask = causal_mask[:, :, :, :T] + attention_mask[:, None, None, :].to(dtype)
    padding_mask = padding_mask == 0
    causal_mask[:, :, :, :T] = causal_mask[:, :, :, :T].masked_fill(padding_mask, min_dtype)
    return causal_mask


def eager_attention_forward(query, key, value, attention_mask, scaling, n_rep):
    key_states = repeat_kv(key, n_rep)
    value_states = repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = Fn.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


def positions_from_mask(attention_mask):
    """GenerationMixin.prepare_inputs_for_generation's position ids."""
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    return position_ids


def silu_mul(gate, up):
    return Fn.silu(gate) * up


# ---- cases ----

def randn(gen, *shape, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale)


def leaf(t):
    return t.clone().requires_grad_(True)


def rmsnorm_case(gen, n, c, eps):
    x = leaf(randn(gen, n, c, scale=1.5) + 0.5)
    w = leaf(randn(gen, c) * 0.3 + 1)
    out = llama_rms_norm(x, w, eps)
    dout = randn(gen, n, c)
    (out * dout).sum().backward()
    return {"n": n, "c": c, "eps": eps, "x": flat(x), "weight": flat(w), "out": flat(out),
            "dout": flat(dout), "dx": flat(x.grad), "dweight": flat(w.grad)}


def qknorm_case(gen, b, t, nh, nkv, hs, eps):
    """Qwen3Attention: q_norm(q_proj(x).view(..., NH, HS)), k_norm likewise,
    on a packed qkv row [q heads | k heads | v heads]."""
    W = (nh + 2 * nkv) * hs
    qkv = leaf(randn(gen, b, t, W, scale=2))
    qw, kw = leaf(randn(gen, hs) * 0.3 + 1), leaf(randn(gen, hs) * 0.3 + 1)
    q = qkv[..., : nh * hs].view(b, t, nh, hs)
    k = qkv[..., nh * hs:(nh + nkv) * hs].view(b, t, nkv, hs)
    v = qkv[..., (nh + nkv) * hs:]
    out = torch.cat([llama_rms_norm(q, qw, eps).reshape(b, t, -1),
                     llama_rms_norm(k, kw, eps).reshape(b, t, -1), v], dim=-1)
    dout = randn(gen, b, t, W)
    (out * dout).sum().backward()
    return {"b": b, "t": t, "nh": nh, "nkv": nkv, "hs": hs, "eps": eps, "qkv": flat(qkv),
            "q_weight": flat(qw), "k_weight": flat(kw), "out": flat(out), "dout": flat(dout),
            "dqkv": flat(qkv.grad), "dq_weight": flat(qw.grad), "dk_weight": flat(kw.grad)}


ROPE_CONFIGS = [
    # name, head_dim, theta, scaling
    ("tinyllama", 64, 10000.0, {}),
    ("qwen3", 128, 1000000.0, {}),
    ("smollm2", 64, 100000.0, {}),
    ("linear2", 64, 10000.0, {"rope_type": "linear", "factor": 2.0}),
    ("llama3.2-1b", 64, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("llama3.1-8b", 128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    ("llama3-tiny", 16, 10000.0, {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
]

TABLE_POSITIONS = [0, 1, 2, 3, 7, 50, 127, 128, 1000, 4095, 8191, 32767, 131071]


def inv_freq_of(hd, theta, sc):
    kind = sc.get("rope_type", "default")
    if kind == "default":
        return default_inv_freq(theta, hd)
    if kind == "linear":
        return linear_inv_freq(theta, hd, sc["factor"])
    return llama3_inv_freq(theta, hd, sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"],
                           sc["original_max_position_embeddings"])


def rope_tables():
    out = []
    for name, hd, theta, sc in ROPE_CONFIGS:
        inv = inv_freq_of(hd, theta, sc)
        pos = torch.tensor([TABLE_POSITIONS])
        cos, sin = rotary_cos_sin(inv, pos)
        half = hd // 2
        out.append({"name": name, "head_dim": hd, "rope_theta": theta, "rope_scaling": sc, "inv_freq": flat(inv),
                    "positions": TABLE_POSITIONS,
                    # the first half of emb: [len(positions), head_dim/2]
                    "cos": flat(cos[0, :, :half]), "sin": flat(sin[0, :, :half])})
    return out


def rope_case(gen, b, t, nh, nkv, hs, mask, cfg):
    """apply_rotary_pos_emb on a packed qkv with positions from the mask."""
    name, hd, theta, sc = cfg
    assert hd == hs
    W = (nh + 2 * nkv) * hs
    qkv = leaf(randn(gen, b, t, W))
    m = torch.tensor(mask, dtype=torch.int64).view(b, t)
    pos = positions_from_mask(m)
    cos, sin = rotary_cos_sin(inv_freq_of(hd, theta, sc), pos)
    q = qkv[..., : nh * hs].view(b, t, nh, hs).transpose(1, 2)
    k = qkv[..., nh * hs:(nh + nkv) * hs].view(b, t, nkv, hs).transpose(1, 2)
    v = qkv[..., (nh + nkv) * hs:]
    qe, ke = apply_rotary_pos_emb(q, k, cos, sin)
    out = torch.cat([qe.transpose(1, 2).reshape(b, t, -1), ke.transpose(1, 2).reshape(b, t, -1), v], dim=-1)
    dout = randn(gen, b, t, W)
    (out * dout).sum().backward()
    return {"b": b, "t": t, "nh": nh, "nkv": nkv, "hs": hs, "config": name, "mask": mask,
            "pos": [int(p) for p in pos.reshape(-1).tolist()], "qkv": flat(qkv), "out": flat(out),
            "dout": flat(dout), "dqkv": flat(qkv.grad)}


def swiglu_case(gen, n, f):
    inp = leaf(randn(gen, n, 2 * f, scale=2))
    out = silu_mul(inp[:, :f], inp[:, f:])
    dout = randn(gen, n, f)
    (out * dout).sum().backward()
    return {"n": n, "f": f, "inp": flat(inp), "out": flat(out), "dout": flat(dout), "dinp": flat(inp.grad)}


def attention_case(gen, b, t, nh, nkv, hs, mask):
    W = (nh + 2 * nkv) * hs
    qkv = leaf(randn(gen, b, t, W))
    m = torch.tensor(mask, dtype=torch.int64).view(b, t)
    q = qkv[..., : nh * hs].view(b, t, nh, hs).transpose(1, 2)
    k = qkv[..., nh * hs:(nh + nkv) * hs].view(b, t, nkv, hs).transpose(1, 2)
    v = qkv[..., (nh + nkv) * hs:].reshape(b, t, nkv, hs).transpose(1, 2)
    out, att = eager_attention_forward(q, k, v, causal_mask_4d(m, t), hs ** -0.5, nh // nkv)
    out = out.reshape(b, t, nh * hs)
    dout = randn(gen, b, t, nh * hs)
    # Rows that see no real key: no gradient asked of them (module doc).
    for bi in range(b):
        for ti in range(t):
            if m[bi, : ti + 1].sum() == 0:
                dout[bi, ti] = 0
    (out * dout).sum().backward()
    return {"b": b, "t": t, "nh": nh, "nkv": nkv, "hs": hs, "mask": mask, "qkv": flat(qkv), "out": flat(out),
            "att": flat(att), "dout": flat(dout), "dqkv": flat(qkv.grad)}


def masks(b, t, kind):
    if kind == "ones":
        return [1] * (b * t)
    m = []
    for bi in range(b):
        pad = (2 * bi + 1) % t
        if kind == "left":
            m += [0] * pad + [1] * (t - pad)
        else:  # right
            m += [1] * (t - pad) + [0] * pad
    return m


def main():
    gen = torch.Generator().manual_seed(20240614)
    g = {
        "source": "scripts/llama_kernels_golden.py (torch %s)" % torch.__version__,
        "rmsnorm": [rmsnorm_case(gen, 6, 40, 1e-6), rmsnorm_case(gen, 3, 7, 1e-5)],
        "head_rmsnorm": [qknorm_case(gen, 2, 3, 4, 2, 16, 1e-6)],
        "rope_tables": rope_tables(),
        "rope": [rope_case(gen, 2, 6, 4, 2, 16, masks(2, 6, "left"), ROPE_CONFIGS[6]),
                 rope_case(gen, 1, 5, 2, 1, 64, masks(1, 5, "ones"), ROPE_CONFIGS[4])],
        "swiglu": [swiglu_case(gen, 5, 24)],
        "attention": [attention_case(gen, 2, 7, 4, 2, 8, masks(2, 7, "left")),
                      attention_case(gen, 1, 5, 6, 1, 16, masks(1, 5, "ones")),
                      attention_case(gen, 2, 6, 3, 3, 8, masks(2, 6, "right")),
                      attention_case(gen, 3, 9, 8, 2, 4, masks(3, 9, "left"))],
    }
    with open(OUT, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
