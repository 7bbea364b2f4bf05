#!/usr/bin/python3
"""Golden chat-template renderings of DeepSpeed-Chat rows for gochat's data package.

For each row of ../shared/data/rm-static-sample/sample.jsonl and of
data/testdata/chat_rows.jsonl (multi-turn and malformed prompts written by
this script) and each model with a chat template in ../shared/data
(TinyLlama, Qwen3, Qwen2.5), writes what steps 1-3 feed the model under
`--chat-template auto` (data.ChatFormat), computed here independently of
the Go code:

  * the conversation: the DeepSpeed-Chat prompt "\\n\\nHuman: q1\\n\\nAssistant: a1
    \\n\\nHuman: q2\\n\\nAssistant:" split with a regular expression into
    alternating user/assistant messages (one space after each marker dropped),
    the answer (chosen/rejected) without its leading space; rows that do not
    alternate, or do not end with the open Assistant turn, are "error" rows;
  * step 1: the rendered conversation + chosen answer, and the byte spans of
    the assistant messages by rendering prefixes (render(messages[:i],
    add_generation_prompt=True) and render(messages[:i+1])), as
    chattemplate.AssistantSpans does; where a prefix property fails (Qwen3's
    earlier turns lose their <think> block) only the last turn's span, and
    "last_only": true;
  * step 2: the conversation + chosen, and + rejected, rendered;
  * step 3: the conversation rendered with add_generation_prompt=True.

Renders with scripts/chat_template_golden.py's environment (transformers'
apply_chat_template semantics, jinja2). Byte offsets are UTF-8 byte offsets.
Writes data/testdata/chat_golden.json. Run from the repository root:

    /usr/bin/python3 scripts/chat_data_golden.py [--shared ../shared/data]
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_golden import load_model, render  # noqa: E402

MODELS = ["tinyllama-tokenizer", "qwen3-tokenizer", "qwen2.5-tokenizer"]

# Multi-turn and malformed rows in Dahoas/rm-static's columns.
ROWS = [
    {"prompt": "\n\nHuman: What is the capital of France?\n\nAssistant: Paris.\n\nHuman: And of Italy?\n\nAssistant:",
     "chosen": " Rome.", "rejected": " Milan, I think."},
    {"prompt": "\n\nHuman: hi\n\nAssistant: Hello! How can I help?\n\nHuman: Tell me a joke about cats.\n\nAssistant: "
               "Why did the cat sit on the computer? To keep an eye on the mouse.\n\nHuman: Another one, in Chinese: 猫\n\nAssistant:",
     "chosen": " 好的：猫为什么喜欢晒太阳？因为它们是“热”爱生活的动物 🙂", "rejected": " No."},
    {"prompt": "\n\nHuman: Can you write code?\n\nAssistant: Yes:\n\n```python\nprint('hi')\n```\n\nHuman: Thanks!  \n\nAssistant:",
     "chosen": " You're welcome.\nAnything else?", "rejected": " "},
    # malformed: two Human turns, two Assistant turns, no open Assistant turn, no leading marker
    {"prompt": "\n\nHuman: one\n\nHuman: two\n\nAssistant:", "chosen": " x", "rejected": " y"},
    {"prompt": "\n\nHuman: one\n\nAssistant: a\n\nAssistant:", "chosen": " x", "rejected": " y"},
    {"prompt": "\n\nHuman: one\n\nAssistant: a", "chosen": " x", "rejected": " y"},
    {"prompt": "Hello\n\nHuman: one\n\nAssistant:", "chosen": " x", "rejected": " y"},
]

LONG = re.compile(r"(\n\nHuman:|\n\nAssistant:)")


def strip1(s):
    return s[1:] if s.startswith(" ") else s


def conversation(prompt):
    """The messages of a DeepSpeed-Chat prompt, or None when it is malformed."""
    if "\n\nHuman:" not in prompt and "\n\nAssistant:" not in prompt:
        if prompt.startswith(" Human: ") and prompt.endswith(" Assistant:") and len(prompt) >= 19:
            return [{"role": "user", "content": prompt[len(" Human: "):-len(" Assistant:")]}]
        if prompt.startswith(" Human:") or prompt.endswith(" Assistant:"):
            return None
        return [{"role": "user", "content": strip1(prompt)}]
    parts = LONG.split(prompt)
    markers, contents = parts[1::2], parts[2::2]
    if parts[0] != "" or markers[0] != "\n\nHuman:" or markers[-1] != "\n\nAssistant:" or contents[-1] != "":
        return None
    msgs = []
    for i, (m, c) in enumerate(zip(markers[:-1], contents[:-1])):
        role = "user" if m == "\n\nHuman:" else "assistant"
        if role != ("user" if i % 2 == 0 else "assistant"):
            return None
        msgs.append({"role": role, "content": strip1(c)})
    if len(msgs) % 2 == 0:  # the last written turn must be the user's
        return None
    return msgs


def nbytes(s):
    return len(s.encode("utf-8"))


def text_of(r):
    if "error" in r:
        raise RuntimeError(r["error"])
    return r["text"]


def sft(tmpls, tokens, msgs):
    full = text_of(render(tmpls, tokens, msgs, False))
    spans, last_only = [], False
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        p = text_of(render(tmpls, tokens, msgs[:i], True))
        f = text_of(render(tmpls, tokens, msgs[:i + 1], False))
        if not f.startswith(p) or not full.startswith(f):
            last_only = True
            break
        spans.append([nbytes(p), nbytes(f)])
    if last_only:
        p = text_of(render(tmpls, tokens, msgs[:-1], True))
        assert full.startswith(p)
        spans = [[nbytes(p), nbytes(full)]]
    return {"text": full, "spans": [s for s in spans if s[0] < s[1]], "last_only": last_only}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared/data", help="the shared data directory")
    ap.add_argument("--out", default="data/testdata")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "chat_rows.jsonl"), "w", encoding="utf-8") as f:
        for r in ROWS:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    files = {"sample.jsonl": os.path.join(args.shared, "rm-static-sample", "sample.jsonl"),
             "chat_rows.jsonl": os.path.join(args.out, "chat_rows.jsonl")}
    models = []
    for d in MODELS:
        tmpls, tokens, digest = load_model(os.path.join(args.shared, d))
        out = {"dir": d, "sha256": digest, "rows": {}}
        for fname, path in files.items():
            rows = []
            with open(path, encoding="utf-8") as f:
                for line in f:
                    r = json.loads(line)
                    msgs = conversation(r["prompt"])
                    if msgs is None:
                        rows.append({"error": True})
                        continue
                    c, rj = strip1(r["chosen"]), strip1(r["rejected"])
                    rows.append({
                        "messages": msgs,
                        "sft": sft(tmpls, tokens, msgs + [{"role": "assistant", "content": c}]),
                        "chosen": text_of(render(tmpls, tokens, msgs + [{"role": "assistant", "content": c}], False)),
                        "rejected": text_of(render(tmpls, tokens, msgs + [{"role": "assistant", "content": rj}], False)),
                        "prompt": text_of(render(tmpls, tokens, msgs, True)),
                    })
            out["rows"][fname] = rows
        models.append(out)
    with open(os.path.join(args.out, "chat_golden.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "scripts/chat_data_golden.py", "models": models}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"chat_golden.json: {len(models)} models, {sum(len(v) for v in models[0]['rows'].values())} rows each")


if __name__ == "__main__":
    main()
