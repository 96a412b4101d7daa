#!/usr/bin/env bash
# A tree of an earlier commit's code for a lent-GPU call, beside this checkout, without checking it out
# (README: "A second machine for an earlier code version").
#
#   bash envs/pin_code.sh <commit> [DIR: a top-level .pinned* folder, default .pinned]
#
# Why: a cell's headline needs >= 2 sessions of one sources version on >= 2 machines, and every change
# to scripts/decodegap/ or the cards starts a new version; a version measured on one machine before the
# code moved on is completed by running that commit's code on a second machine. Checking the commit
# out in this tree did that on 2026-12-06 (H100, code 46e2dec), but left the tree detached with the
# newer manifest and records copied over, by hand, and a session cut off there left it so.
#
# DIR gets the commit's files (git archive) without results/raw/, results/benchmarks/ and
# results/exploratory/ (a call carries at most 64 MiB), and this checkout's results/raw.sha256 and
# results/environment/*.json: the batch skips every session the manifest lists (`batch --listed-in`),
# recorded by whatever code, and SHAPES_FROM can name a record made after the commit. Run again with
# the same commit after each call's ingest, to carry the grown manifest. DIR/.pinned_sha names the
# commit; DIR is gitignored (.pinned/) and travels with the call's `carry`:
#
#   cd .pinned && SHA=<commit> SHAPES_FROM=results/environment/<record>.json bash -c '. envs/lent_gpu.sh; stage; B ...'
#
# The sessions record the pinned tree's sources: the script prints their hash, and
# `python -m decodegap.analysis.provenance code` matches them to the commit after ingest (done here, at
# main's HEAD, as for any call). Nothing under results/raw/ is read or written here.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: bash envs/pin_code.sh <commit> [DIR: .pinned (default) or another top-level .pinned* folder]" >&2; exit 2; }
SHA=$(git rev-parse -q --verify "$1^{commit}") || { echo "envs/pin_code.sh: '$1' is not a commit of this repository" >&2; exit 2; }
DIR=${2:-.pinned}
# a folder of this checkout that git ignores (.gitignore: /.pinned*/): a call carries only such a path of
# the tree, and an ignored one is never committed or mistaken for the project's own files
[[ "$DIR" =~ ^\.pinned[A-Za-z0-9._-]*$ ]] || { echo "envs/pin_code.sh: DIR '$DIR' is not a top-level .pinned* folder of this checkout (the call's carry names it; git ignores it)" >&2; exit 2; }
git check-ignore -q "$DIR/" || { echo "envs/pin_code.sh: git does not ignore $DIR/ (.gitignore: /.pinned*/)" >&2; exit 2; }
if [ -e "$DIR" ]; then
  # one commit per folder: a folder of another commit's code would be carried under the wrong SHA
  [ -f "$DIR/.pinned_sha" ] || { echo "envs/pin_code.sh: $DIR exists and is not a pinned tree (no $DIR/.pinned_sha): move it away first" >&2; exit 3; }
  old=$(cat "$DIR/.pinned_sha")
  [ "$old" = "$SHA" ] || { echo "envs/pin_code.sh: $DIR holds commit $old, not $SHA: remove it (rm -r $DIR) or name another DIR" >&2; exit 3; }
  echo "$DIR holds $SHA already: refreshing its manifest and environment records"
else
  mkdir -p "$DIR"
  git archive --format=tar "$SHA" -- . ':(exclude)results/raw' ':(exclude)results/benchmarks' ':(exclude)results/exploratory' \
    | tar -x -C "$DIR"
  echo "$SHA" > "$DIR/.pinned_sha"
fi
# this checkout's manifest and records, as they stand (sessions ingested since the last commit too)
mkdir -p "$DIR/results/environment"
cp results/raw.sha256 "$DIR/results/raw.sha256"
cp results/environment/*.json "$DIR/results/environment/"
sources=$(PYTHONPATH=scripts python3 -c 'import sys; from pathlib import Path
from decodegap.core.sources import source_hashes, sources_sha256
print(sources_sha256(source_hashes(Path(sys.argv[1]).resolve())))' "$DIR")
echo "$DIR: commit $SHA, measurement sources ${sources:0:8}, manifest of $(wc -l < "$DIR/results/raw.sha256") files"
echo "a call: run(carry=[\"$DIR\"], command=\"cd $DIR && SHA=$SHA [SHAPES_FROM=results/environment/<record>.json] bash -c '. envs/lent_gpu.sh; stage; B ...'\")"
