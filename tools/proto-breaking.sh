#!/usr/bin/env bash
# buf breaking for proto/ (npm run breaking; CI runs it): the proto of the
# working tree against that of an earlier commit, HEAD~1 unless
# BUF_BREAKING_AGAINST names another (the last commit CI passed, a release
# tag). Rules: buf.yaml's `breaking` section, FILE, which includes WIRE_JSON
# (what REST clients read) and WIRE; and tools/rest-breaking.ts for what
# those cannot see: an RPC's REST mapping or success status changed, a field
# newly REQUIRED.
#
# A breaking change passes only when its commit says so: a line starting
# "BREAKING CHANGE:" in the commit message, and an added line containing
# "BREAKING" in README.md (its Changelog section).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
buf="$root/node_modules/.bin/buf"
against="${BUF_BREAKING_AGAINST:-HEAD~1}"

if ! base=$(git rev-parse --verify --quiet "$against^{commit}"); then
  echo "buf breaking: there is no commit $against here (a first commit, or a shallow clone): nothing to compare against, skipped."
  exit 0
fi
if ! git cat-file -e "$base:proto" 2>/dev/null; then
  echo "buf breaking: $against has no proto/: nothing to compare against, skipped."
  exit 0
fi

# The earlier tree, built with its own buf.yaml; the google protos it
# imports come from node_modules, as in this tree.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp"
ln -s "$root/node_modules" "$tmp/node_modules"
(cd "$tmp" && "$buf" build proto -o "$tmp/against.binpb" && "$buf" build proto -o "$tmp/against.json")
"$buf" build proto -o "$tmp/current.json"

short=$(git rev-parse --short "$base")
# buf breaking compares descriptors; the REST mapping and REQUIRED marks are
# option values, which tools/rest-breaking.ts compares.
descriptors=$("$buf" breaking proto --against "$tmp/against.binpb" 2>&1) || true
options=$(node --import tsx tools/rest-breaking.ts "$tmp/against.json" "$tmp/current.json" 2>&1) || true
report=$(printf '%s\n%s\n' "$descriptors" "$options" | sed '/^$/d')
if [ -z "$report" ]; then
  echo "buf breaking: proto/ keeps compatibility with $against ($short)."
  exit 0
fi

echo "$report"
message=$(git log -1 --format=%B)
if grep -q '^BREAKING CHANGE:' <<<"$message" && git diff "$base" -- README.md | grep -q '^+.*BREAKING'; then
  echo "buf breaking: proto/ breaks compatibility with $against ($short), and the commit and README's Changelog say so."
  exit 0
fi
cat >&2 <<EOF
buf breaking: proto/ breaks compatibility with $against ($short) (above).
Clients generated from the proto or from gen/openapi break on such a change.
Avoid it (add a field or an RPC instead of changing one), or say so: a line
"BREAKING CHANGE: <what and what clients must do>" in the commit message and
an entry with "BREAKING" in README.md's Changelog.
EOF
exit 1
