#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, vet, and every Go test
# (fuzz seed corpora included) with cgo off, on the CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin" CGO_ENABLED=0

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt -l lists:"; echo "$unformatted"; exit 1
fi
go vet ./...
go test -count=1 -timeout 30m ./...
