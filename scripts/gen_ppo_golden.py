#!/usr/bin/python3
"""Golden dumps for gochat's PPO math (package ppo), computed with PyTorch.

Run by hand with Debian's PyTorch:
    /usr/bin/python3 scripts/gen_ppo_golden.py

It writes ppo/testdata/<case>.safetensors. Each case is a batch of
experience with random log-probabilities, values and scores, and an attention
mask with left-padded prompts and answers of varied lengths: rows whose answer
runs to the end of the batch, rows that stop early, a row that stops one
position before the end, and one with a padding hole inside its answer.

The functions below port REFERENCE.md §5, following DeepSpeed-Chat's
dschat/rlhf/ppo_trainer.py (compute_rewards, the zeroing after the ends in
train_rlhf, get_advantages_and_returns, actor_loss_fn, critic_loss_fn) in
float64, with autograd for the loss gradients. The optional whitening and the
clip fractions are gochat's definitions (masked mean and biased variance; the
fraction of counted positions where the clipped term is strictly larger, as
trlx's pg_clipfrac / vf_clipfrac).

Stored per case (T = S-1 log-prob positions, A = T - start answer positions):
  inputs   attention_mask [B,S] I64, prompt_len [1] I64, config scalars
           (kl_ctl, clip_reward_value, cliprange, cliprange_value, gamma, lam
           F64; whiten I64), logprobs, ref_logprobs, values (old), scores [B],
           new_logprobs, new_values (F32: exactly what gochat reads)
  outputs  ends [B] I64; rewards, old_values (zeroed after the end),
           advantages, returns [B,T] F64, zero before start; actor_loss,
           actor_clipfrac, critic_loss, critic_clipfrac, kl [1] F64;
           actor_grad = dL/dnew_logprobs, critic_grad = dL/dnew_values [B,T]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_model_golden import write_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ppo", "testdata")


# --------------------------------------------------------------------------
# REFERENCE.md §5, as DeepSpeed-Chat computes it.

def compute_rewards(cfg, prompt_len, log_probs, ref_log_probs, reward_score, action_mask):
    rewards = -cfg["kl_ctl"] * (log_probs - ref_log_probs)
    start = prompt_len - 1
    # Explicit masks count EOS as a real token (DeepSpeed-Chat's pad == eos
    # hides it), so the last answer action is at start + n - 1.
    ends = start + action_mask[:, start:].sum(1)
    reward_clip = torch.clamp(reward_score, -cfg["clip_reward_value"], cfg["clip_reward_value"])
    for j in range(log_probs.shape[0]):
        rewards[j, start:ends[j]][-1] += reward_clip[j]
    return rewards


def get_advantages_and_returns(cfg, values, rewards, start):
    lastgaelam = 0
    advantages_reversed = []
    length = rewards.size()[-1]
    for t in reversed(range(start, length)):
        nextvalues = values[:, t + 1] if t < length - 1 else 0.0
        delta = rewards[:, t] + cfg["gamma"] * nextvalues - values[:, t]
        lastgaelam = delta + cfg["gamma"] * cfg["lam"] * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values[:, start:]
    return advantages.detach(), returns


def whiten(x, mask):
    n = mask.sum()
    mean = (x * mask).sum() / n
    var = (((x - mean) ** 2) * mask).sum() / n
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


def actor_loss_fn(cfg, logprobs, old_logprobs, advantages, mask):
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1.0 - cfg["cliprange"], 1.0 + cfg["cliprange"])
    pg_loss = torch.sum(torch.max(pg_loss1, pg_loss2) * mask) / mask.sum()
    clipfrac = torch.sum((pg_loss2 > pg_loss1).double() * mask) / mask.sum()
    return pg_loss, clipfrac


def critic_loss_fn(cfg, values, old_values, returns, mask):
    values_clipped = torch.clamp(values, old_values - cfg["cliprange_value"], old_values + cfg["cliprange_value"])
    vf_loss1 = (values - returns) ** 2
    vf_loss2 = (values_clipped - returns) ** 2
    vf_loss = 0.5 * torch.sum(torch.max(vf_loss1, vf_loss2) * mask) / mask.sum()
    clipfrac = torch.sum((vf_loss2 > vf_loss1).double() * mask) / mask.sum()
    return vf_loss, clipfrac


def train_rlhf_math(cfg, prompt_len, attention_mask, logp, ref, values, score, new_logp, new_values):
    """train_rlhf without the models: everything from the experience to the
    two losses and their gradients."""
    start = prompt_len - 1
    action_mask = attention_mask[:, 1:]  # long, as DeepSpeed-Chat's
    old_values = values.clone()
    with torch.no_grad():
        old_rewards = compute_rewards(cfg, prompt_len, logp, ref, score, action_mask)
        ends = start + action_mask[:, start:].sum(1)
        for i in range(old_rewards.shape[0]):
            old_rewards[i, ends[i]:] = 0
            old_values[i, ends[i]:] = 0
        advantages, returns = get_advantages_and_returns(cfg, old_values, old_rewards, start)
        if cfg["whiten"]:
            advantages = whiten(advantages, action_mask[:, start:])

    new_logp = new_logp.clone().requires_grad_(True)
    actor_loss, actor_clipfrac = actor_loss_fn(cfg, new_logp[:, start:], logp[:, start:], advantages,
                                               action_mask[:, start:])
    actor_loss.backward()
    new_values = new_values.clone().requires_grad_(True)
    critic_loss, critic_clipfrac = critic_loss_fn(cfg, new_values[:, start:], old_values[:, start:], returns,
                                                  action_mask[:, start:])
    critic_loss.backward()

    m = action_mask[:, start:]
    kl = ((logp - ref)[:, start:] * m).sum() / m.sum()

    def full(x):  # [B,A] -> [B,T], zero before start
        out = torch.zeros_like(logp)
        out[:, start:] = x
        return out

    T = logp.shape[1]
    return {
        "ends": torch.clamp(ends, max=T),
        "rewards": full(old_rewards[:, start:]),
        "old_values": full(old_values[:, start:]),
        "advantages": full(advantages),
        "returns": full(returns),
        "actor_loss": actor_loss.detach().reshape(1),
        "actor_clipfrac": actor_clipfrac.reshape(1),
        "actor_grad": new_logp.grad,
        "critic_loss": critic_loss.detach().reshape(1),
        "critic_clipfrac": critic_clipfrac.reshape(1),
        "critic_grad": new_values.grad,
        "kl": kl.reshape(1),
    }


# --------------------------------------------------------------------------
# Cases.

DEFAULT = dict(kl_ctl=0.1, clip_reward_value=5.0, cliprange=0.2, cliprange_value=0.2, gamma=1.0, lam=0.95,
               whiten=False)


def case(name, cfg, seed, prompt_pads, answers):
    """prompt_pads[b] left-padding tokens in each prompt; answers[b] a 0/1
    list of length A (the answer's attention mask)."""
    g = torch.Generator().manual_seed(seed)
    B, A = len(answers), len(answers[0])
    P = max(prompt_pads) + 3
    S = P + A
    T = S - 1
    attn = torch.zeros(B, S, dtype=torch.int64)
    for b in range(B):
        attn[b, prompt_pads[b]:P] = 1
        attn[b, P:] = torch.tensor(answers[b])

    def f32(x):  # float32 inputs, promoted exactly to float64
        return x.float().double()

    logp = f32(-torch.empty(B, T, dtype=torch.float64).exponential_(1.0, generator=g))
    ref = f32(logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64))
    values = f32(torch.randn(B, T, generator=g, dtype=torch.float64))
    score = f32(4.0 * torch.randn(B, generator=g, dtype=torch.float64))
    score[0] = 7.5  # clipped from above
    score[1] = -6.25  # clipped from below
    new_logp = f32(logp + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64))
    new_values = f32(values + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64))

    out = train_rlhf_math(cfg, P, attn, logp, ref, values, score, new_logp, new_values)
    tensors = {
        "attention_mask": attn,
        "prompt_len": torch.tensor([P], dtype=torch.int64),
        "logprobs": logp.float(), "ref_logprobs": ref.float(), "values": values.float(), "scores": score.float(),
        "new_logprobs": new_logp.float(), "new_values": new_values.float(),
        "whiten": torch.tensor([int(cfg["whiten"])], dtype=torch.int64),
    }
    for k in ("kl_ctl", "clip_reward_value", "cliprange", "cliprange_value", "gamma", "lam"):
        tensors[k] = torch.tensor([cfg[k]], dtype=torch.float64)
    for k, v in out.items():
        tensors[k] = v.detach().double() if v.is_floating_point() else v.long()
    write_safetensors(os.path.join(OUT, name + ".safetensors"), tensors)
    print(name, {k: round(float(out[k]), 6) for k in ("actor_loss", "actor_clipfrac", "critic_loss",
                                                       "critic_clipfrac", "kl")}, "ends", out["ends"].tolist())


def main():
    # A = 7 answer positions. Rows: runs to the end; stops after 3 tokens
    # (2 prompt pads); stops after 2; stops one before the end; a padding
    # hole inside the answer; runs to the end (1 prompt pad).
    answers = [
        [1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1],
    ]
    case("default", DEFAULT, 1, [0, 2, 0, 1, 0, 1], answers)
    tuned = dict(kl_ctl=0.05, clip_reward_value=2.0, cliprange=0.1, cliprange_value=0.05, gamma=0.9, lam=0.8,
                 whiten=True)
    answers = [
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0],
    ]
    case("tuned", tuned, 2, [1, 0, 3, 2], answers)


if __name__ == "__main__":
    main()
