#!/usr/bin/env bash
# Places a local model directory into the Hugging Face cache under a Hub id,
# laid out as huggingface_hub lays out a download, so that gochat and
# transformers resolve the id offline:
#
#   $HUB/models--ORG--NAME/blobs/<sha256>            the files (hard links when possible)
#   $HUB/models--ORG--NAME/snapshots/<commit>/FILE   -> ../../blobs/<sha256>
#   $HUB/models--ORG--NAME/refs/main                 <commit>
#
#   scripts/hf-cache-place.sh DIR ORG/NAME
#
# HUB is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
# The commit is a made-up 40-hex id derived from the files' hashes (the
# layout needs one; nothing checks it against a Hub).
#
# Example (issue 10's headline run with random-init models):
#   gochat init --arch opt-1.3b --tokenizer ../shared/data/opt-tokenizer --output-dir M/opt-1.3b
#   HF_HUB_CACHE=/tmp/hf scripts/hf-cache-place.sh M/opt-1.3b facebook/opt-1.3b
#   HF_HUB_CACHE=/tmp/hf HF_HUB_OFFLINE=1 gochat train --actor opt-1.3b --reward opt-350m ...
set -euo pipefail
if [[ $# -ne 2 || ! -d $1 || $2 != */* ]]; then
	echo "usage: $0 MODEL_DIR ORG/NAME" >&2
	exit 2
fi
src=$1
repo=$2
hub=${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}
dir=$hub/models--${repo//\//--}
mkdir -p "$dir/blobs" "$dir/refs"

declare -A blob
sums=""
for f in "$src"/*; do
	[[ -f $f ]] || continue
	h=$(sha256sum "$f" | cut -d' ' -f1)
	blob[$(basename "$f")]=$h
	sums+="$h"
	if [[ ! -e $dir/blobs/$h ]]; then
		ln "$f" "$dir/blobs/$h.tmp" 2>/dev/null || cp "$f" "$dir/blobs/$h.tmp"
		mv "$dir/blobs/$h.tmp" "$dir/blobs/$h"
	fi
done
commit=$(printf '%s' "$sums" | sha1sum | cut -d' ' -f1)
snap=$dir/snapshots/$commit
mkdir -p "$snap"
for name in "${!blob[@]}"; do
	ln -sfn "../../blobs/${blob[$name]}" "$snap/$name"
done
printf '%s' "$commit" >"$dir/refs/main.tmp"
mv "$dir/refs/main.tmp" "$dir/refs/main"
echo "$repo -> $snap"
