// Package data is gochat's RLHF data pipeline, with DeepSpeed-Chat's
// semantics (REFERENCE.md §3).
//
// # Reading
//
// A Dataset is resolved (Resolve) from a Hub id such as a DeepSpeed-Chat
// dataset name, found in the Hugging Face cache
// (datasets--ORG--NAME/snapshots/COMMIT/...) and downloaded into it when
// absent (package hub), or from a path: one Parquet, JSON (a list of objects) or JSON lines file, or a
// folder of them with the split in the file or folder names. An Adapter maps
// the raw columns of each row to a Sample — prompt, chosen and rejected in
// the canonical "\n\nHuman: ...\n\nAssistant:" / " Human: ... Assistant:"
// form with responses starting with a space — exactly as DeepSpeed-Chat's
// raw_datasets.py does for Dahoas/rm-static, Dahoas/full-hh-rlhf,
// Dahoas/synthetic-instruct-gptj-pairwise, yitingxie/rlhf-reward-datasets,
// openai/webgpt_comparisons, stanfordnlp/SHP and local/jsonfile. Generic
// files use a column mapping (Generic).
//
// Files are streamed: Parquet through Arrow (pqarrow) one record batch of
// 4096 rows at a time, reading only the adapter's columns; JSON and JSON lines
// one object at a time. Bad input is an error naming the file and, where they
// apply, the row, the line:column and the data column (RowError).
//
// # Phases
//
// --data-split 2,4,4 gives each training phase its own rows: a seeded
// permutation of each dataset part (numpy RandomState semantics, so the same
// seed selects the same rows as DeepSpeed-Chat) is cut into three slices
// (Split, Permutation). Datasets that ship only a train split are first cut
// 9:1 into train and eval the same way. Several datasets are blended by
// concatenation and a seeded shuffle (Load).
//
// # Examples and batches
//
// Build tokenizes the rows of one phase into Examples (unpadded ids), and
// Collator pads them into [B,T] int32 Batches ready for model.Batch:
//
//	phase 1 (SFT)     prompt+chosen (+EOS with AddEOS), right-padded to MaxSeqLen;
//	                  labels = ids on real tokens (optionally the response only)
//	phase 2 (reward)  prompt+chosen+EndText and prompt+rejected+EndText, each
//	                  tokenized as one text (RewardText), right-padded to MaxSeqLen
//	phase 3 (PPO)     the prompt; longer than MaxPromptLen is dropped and counted;
//	                  LEFT-padded to MaxPromptLen
//	unsupervised      texts tokenized, concatenated, cut into blocks of
//	                  MaxPromptLen+MaxAnswerLen; labels = ids
//
// BOS, EOS and PAD come from the tokenizer and every batch carries an
// explicit attention mask, so nothing depends on PAD being BOS (DeepSpeed-Chat
// sets pad = eos and skips "num_padding_at_beginning"; gochat does not need
// to).
//
// # Chat templates
//
// With Options.Chat (a ChatFormat over a model's chat template) the phases
// render conversations instead: Conversation parses Sample.Prompt into
// alternating user/assistant messages ("\n\nHuman: q1\n\nAssistant: a1
// \n\nHuman: q2\n\nAssistant:" gives user q1, assistant a1, user q2; the
// " Human: q Assistant:" form and plain prompts one user message) and the
// response, without its leading space, is the final assistant message.
// Phase 1 is the rendered conversation with Example.Spans, the token ranges
// of the assistant messages (ChatFormat.SFT), on which ResponseOnly puts
// the loss; phase 2 the conversation with the chosen and with the rejected
// answer, rendered, without EndText; phase 3 the conversation with the
// generation prompt (Example.Messages keeps it). Rendered text is tokenized
// without the tokenizer's own special tokens (PlainEncoder), as
// transformers' apply_chat_template(tokenize=True). Rows that are no
// conversation, or that the template refuses, are dropped and counted
// (Stats.Unrendered). scripts/chat_data_golden.py renders the shared sample
// with the real templates in Python (testdata/chat_golden.json).
//
// # Cache
//
// Built sets are cached as Arrow IPC files under a cache folder
// (DefaultCacheDir), keyed by the files (path, size and a SHA-256 of the
// bytes: an edit is seen even when it keeps the size and the modification
// time), the adapter, part, phase, split, seed, tokenizer fingerprint,
// lengths and, for templated sets only, the chat template's digest, so a
// second run reads the cache instead of tokenizing. A cache
// file is written to a temporary name and renamed; a failed build writes
// nothing.
//
// # Where gochat differs from DeepSpeed-Chat
//
//   - A null cell drops the row from the phases that need it (counted as
//     empty); DeepSpeed-Chat skips it for local/jsonfile and fails for the
//     other datasets. Malformed input is an error unless
//     Options.SkipMalformed counts and drops it.
//   - Collator.ResponseOnly offers a phase-1 loss on the response only; the
//     prompt's extent is the common prefix of the prompt's own encoding and
//     the full sequence's.
//   - Padding never relies on PAD = EOS (see above).
//   - Unsupervised texts are grouped 1000 at a time as datasets.map does
//     with one process; DeepSpeed-Chat's --preprocessing_num_workers shards
//     first, which moves the group boundaries.
//
// The package does not import the tokenizer package: it owns the small
// Tokenizer interface it needs.
package data
