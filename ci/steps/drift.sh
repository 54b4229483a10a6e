#!/usr/bin/env bash
# Scheduled: try the series against upstream main (cloned here) and against every
# upstream release newer than the base (wheels fetched through pip, cached).
# Reports: reports/drift.json, reports/drift.xml (JUnit, one case per target and
# patch). Fails only when a patch conflicts and is neither upstream nor obsolete.
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM_URL=${UPSTREAM_URL:-https://github.com/vllm-project/vllm}
UPSTREAM_REF=${UPSTREAM_REF:-main}
dir=.build/upstream-vllm
mkdir -p .build
if [ -d "$dir/.git" ]; then
  git -C "$dir" fetch --quiet --tags origin "$UPSTREAM_REF"
  git -C "$dir" checkout --quiet --force FETCH_HEAD
else
  # Blobs on demand: full history and tags (git describe gives the tree's
  # version), file contents only for the checkout.
  git clone --quiet --filter=blob:none --branch "$UPSTREAM_REF" "$UPSTREAM_URL" "$dir"
fi
echo "upstream $UPSTREAM_REF: $(git -C "$dir" describe --tags --always)"
make drift UPSTREAM="$dir" RELEASES=all
