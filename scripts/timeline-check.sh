#!/usr/bin/env bash
# The memory timeline in a real browser. Makes two pages from the bundled
# gpt_tiny training graph - gmopt-compile --timeline with full recompute (so
# recompute regions are shaded) and gmopt-run --timeline with the default
# pipeline - checks their structure and peaks against the reports
# (tests/lit/Inputs/timeline_check.py, what the ctest checks too), then,
# where Chromium is installed (Debian: apt-get install -y chromium), renders
# each page headless: a copy with a small script counts the panels, the
# tensor bands the browser laid out with a nonzero box and those whose
# tooltip (<title>) names the tensor's bytes and producer, and a screenshot is
# written for a person to look at. Without Chromium the render is skipped
# (said so, exit 0). CI runs the structural check only (the lit test).
# Usage: scripts/timeline-check.sh [BUILD_DIR] [OUT_DIR]
#        (defaults: build, BUILD_DIR/timeline-check)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${1:-build}"
OUT="${2:-$BUILD/timeline-check}"
MODEL=testdata/gpt_tiny/training_model.onnx
DIMS=(--dim batch=4 --dim batch_x_seq=256)
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

"$BUILD/tools/gmopt-compile" "$MODEL" "${DIMS[@]}" \
  --passes='canonicalize,fold-transpose,recompute{mode=full},schedule,plan-buffers' \
  -o "$OUT/recompute.gm" --report-json "$OUT/recompute.json" \
  --timeline "$OUT/recompute.html" >/dev/null
"$BUILD/tools/gmopt-run" "$MODEL" --backend=cpu "${DIMS[@]}" \
  --inputs testdata/gpt_tiny/test_data_set_0 --baseline --quiet \
  --report-json "$OUT/run.json" --timeline "$OUT/run.html" >/dev/null

status=0
for page in recompute run; do
  echo "== $page.html"
  facts="$(python3 tests/lit/Inputs/timeline_check.py "$OUT/$page.html" "$OUT/$page.json")"
  echo "$facts"
  if grep -q ': no' <<<"$facts"; then status=1; fi
done

CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$CHROMIUM" ]; then
  echo "chromium not found: skipped the browser render (apt-get install -y chromium)"
  exit "$status"
fi

# The pages have no script; a copy of each loads this one, which asks the
# browser what it laid out.
cat >"$OUT/probe.js" <<'JS'
const bands = [...document.querySelectorAll(".band")].filter(e => e.querySelector("title"));
const drawn = bands.filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; });
const named = bands.filter(e => {
  const text = e.querySelector("title").textContent;
  return (text.includes(" bytes), ") && text.includes("\nproduced by ")) ||
         text.includes(" smaller ");
});
const pre = document.createElement("pre");
pre.textContent = "browser: panels " + document.querySelectorAll("g.panel").length +
  " bands " + bands.length + " drawn " + drawn.length + " named " + named.length;
document.body.appendChild(pre);
JS
for page in recompute run; do
  probe="$OUT/$page.probe.html"
  sed 's|</body>|<script src="probe.js"></script></body>|' "$OUT/$page.html" >"$probe"
  result="$("$CHROMIUM" --headless --no-sandbox --disable-gpu --dump-dom \
    "file://$probe" 2>/dev/null | grep -o 'browser: panels [0-9]* bands [0-9]* drawn [0-9]* named [0-9]*' || true)"
  echo "$page.html: ${result:-browser: no result}"
  read -r _ _ panels _ bands _ drawn _ named <<<"${result:-x x 0 x 0 x -1 x -1}"
  if [ "$panels" != 2 ] || [ "$bands" = 0 ] || [ "$bands" != "$drawn" ] ||
     [ "$bands" != "$named" ]; then status=1; fi
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --screenshot="$OUT/$page.png" --window-size=1600,1000 \
    "file://$OUT/$page.html" >/dev/null 2>&1
  echo "screenshot: $OUT/$page.png"
done
exit "$status"
