#!/usr/bin/env bash
# Refreshes testdata/webhooks from GitHub's published webhook examples
# (npm @octokit/webhooks-examples, pinned in package.json). Run `npm ci` first,
# or let `make deps` do it. Each example is written as <event>.<action>.<n>.json
# (n counts examples of one event and action).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/node_modules/@octokit/webhooks-examples/api.github.com/index.json"
dst="$root/testdata/webhooks"
[ -f "$src" ] || { echo "missing $src: run 'npm ci' first" >&2; exit 1; }
rm -f "$dst"/*.json
node - "$src" "$dst" <<'JS'
const fs = require("fs");
const [src, dst] = process.argv.slice(2);
const wanted = new Set(["workflow_job", "workflow_run", "ping", "installation"]);
const seen = {};
for (const ev of JSON.parse(fs.readFileSync(src, "utf8"))) {
  if (!wanted.has(ev.name)) continue;
  for (const ex of ev.examples) {
    const action = ex.action || "none";
    const key = `${ev.name}.${action}`;
    seen[key] = (seen[key] || 0) + 1;
    const file = `${dst}/${key}.${seen[key]}.json`;
    fs.writeFileSync(file, JSON.stringify(ex, null, 2) + "\n");
    console.log(file.slice(dst.length + 1));
  }
}
JS
