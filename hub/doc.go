// Package hub resolves Hugging Face Hub names to local directories: a model
// or dataset repository is found in the Hugging Face cache exactly as
// huggingface_hub lays it out, and downloaded into that same layout when it
// is absent, so that gochat, transformers and datasets share one cache.
//
// # Names
//
// A model name is a local directory (which always wins), a Hub id
// ("facebook/opt-1.3b"), or one of DeepSpeed-Chat's short forms for the OPT
// family (ModelID): "opt-1.3b" and "1.3b" mean facebook/opt-1.3b, for the
// sizes 125m, 350m, 1.3b, 2.7b, 6.7b, 13b, 30b and 66b. A revision is a
// branch, a tag or a full commit hash; "" means main.
//
// # The cache
//
// The cache directory is $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (CacheDir).
// A repository lives in one folder named by its kind and id:
//
//	models--facebook--opt-1.3b/
//	  refs/main                      the commit hash main points at (no newline)
//	  blobs/<etag>                   file contents, named by ETag: an LFS
//	                                 file's sha256, else its git blob id
//	  blobs/<etag>.incomplete        a download in progress (resumed)
//	  snapshots/<commit>/config.json -> ../../blobs/<etag>   (relative links)
//	  .no_exist/<commit>/<file>      an empty file: the repository lacks <file>
//	datasets--Dahoas--rm-static/...
//	.locks/models--facebook--opt-1.3b/<etag>.lock   held while a blob downloads
//
// A revision is found in the cache through refs/<revision>, or directly as
// snapshots/<commit> for a commit hash (Lookup). A snapshot that holds what
// gochat reads is used without asking the Hub, even when online: delete
// refs/main, or name a new --revision, to pick up a newer commit. What
// gochat reads: for a model, config.json, one complete weight layout
// (model.safetensors, a sharded model.safetensors.index.json set,
// pytorch_model.bin, or its sharded set, in tensor.OpenDir's order) and
// tokenizer.json or vocab.json (unless .no_exist says the repository has
// neither); for a dataset, a Parquet, JSON or JSON Lines file.
//
// # The protocol
//
// Downloading a revision takes these requests to the endpoint ($HF_ENDPOINT,
// else https://huggingface.co), each with "Authorization: Bearer TOKEN" when
// a token is set ($HF_TOKEN, else the file `huggingface-cli login` writes,
// $HF_HOME/token):
//
//   - GET /api/models/ID/revision/REV (/api/datasets/... for a dataset): the
//     commit ("sha") and the file list ("siblings"). From the list a model
//     takes its configuration, generation and tokenizer files and one weight
//     layout (safetensors before PyTorch .bin; Flax, TensorFlow, ONNX never),
//     plus the shards its index names; a dataset takes its Parquet files, or
//     its JSON and JSON Lines files when it has no Parquet, plus README.md and
//     dataset_info(s).json. A dataset whose main branch has neither (a
//     loading script) is read from the Hub's Parquet conversion,
//     refs/convert/parquet, when no revision was asked for.
//   - HEAD /ID/resolve/COMMIT/FILE (/datasets/ID/resolve/...) per file the
//     snapshot lacks: X-Repo-Commit, the ETag (X-Linked-Etag, the sha256, for
//     an LFS file) and the size (X-Linked-Size, else Content-Length). An LFS
//     file answers with a redirect to a CDN; relative redirects (a renamed
//     repository) are followed.
//   - GET of the content, from the CDN for an LFS file, without the token
//     when the host differs from the Hub's (as huggingface_hub does). It
//     goes to blobs/<etag>.incomplete under the lock; a dropped connection
//     or a stall is resumed with "Range: bytes=N-" (by this process, up to
//     Client.Retries times without progress, and by the next run from the
//     .incomplete file); the size is checked, and an LFS file's sha256
//     against its X-Linked-Etag (a mismatch discards the download). The blob
//     is then renamed into place.
//
// Once every file is there the snapshot's links are made, a model's
// missing optional files are recorded under .no_exist, and refs/REV is
// written atomically, so a snapshot gochat makes is never half made.
//
// With HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1) no request is made and
// a name the cache lacks is an error that says so. A 401 or 403 names the
// repository as gated or private and says to set HF_TOKEN (or run
// huggingface-cli login); a 404 says which of repository, revision or file
// is missing.
package hub
