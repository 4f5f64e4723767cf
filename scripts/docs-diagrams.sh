#!/usr/bin/env bash
# Renders the documentation's diagrams: docs/diagrams/NAME.mmd (Mermaid) -> docs/img/NAME.svg.
# The SVGs are committed and the site shows them as plain images, so a page needs no script
# and no network to show its pictures; run this after editing a .mmd file and commit both.
#
# Uses mermaid-cli from npm (installed once into a cache folder, pinned below) driving
# Debian's Chromium (`apt-get install chromium`; no browser download). Labels are SVG text,
# not HTML in <foreignObject>, in Arial's metrics (Liberation Sans on Debian), so they fit
# their boxes wherever the image is shown. Each diagram should be at most 688 px wide: the
# width of a page's text at a 1280 px window, where the picture shows at its own size.
#
#   scripts/docs-diagrams.sh [NAME ...]     (default: every docs/diagrams/*.mmd)
set -euo pipefail
cd "$(dirname "$0")/.."
MERMAID_CLI=11.17.0 # the last release that runs on Debian 12's Node 20
MERMAID=11.17.2
PUPPETEER=24.43.1
CONTENT_WIDTH=688
tools=${DOCS_DIAGRAMS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/redis-agent-sessions/mermaid-cli-$MERMAID_CLI}
chromium=${CHROMIUM:-$(command -v chromium || echo /usr/bin/chromium)}

if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    chromium=/usr/bin/chromium
  else
    echo "docs-diagrams: no Chromium (sudo apt-get install chromium, or set CHROMIUM)" >&2
    exit 1
  fi
fi
if [ ! -x "$tools/node_modules/.bin/mmdc" ]; then
  command -v npm >/dev/null || {
    echo "docs-diagrams: npm is needed (apt-get install npm)" >&2
    exit 1
  }
  mkdir -p "$tools"
  PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$tools" --no-audit --no-fund --loglevel=error \
    "@mermaid-js/mermaid-cli@$MERMAID_CLI" "mermaid@$MERMAID" "puppeteer@$PUPPETEER" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/puppeteer.json" <<JSON
{"executablePath": "$chromium", "headless": true,
 "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--host-resolver-rules=MAP * ~NOTFOUND"]}
JSON
font='Arial, Helvetica, \"Liberation Sans\", sans-serif'
cat >"$work/mermaid.json" <<JSON
{"theme": "base", "htmlLabels": false, "fontFamily": "$font",
 "themeVariables": {"fontFamily": "$font", "fontSize": "15px",
   "primaryColor": "#fdecea", "primaryBorderColor": "#c62828", "primaryTextColor": "#212121",
   "lineColor": "#555555", "secondaryColor": "#f5f5f5", "tertiaryColor": "#fafafa",
   "clusterBkg": "#fafafa", "clusterBorder": "#9e9e9e",
   "actorBkg": "#fdecea", "actorBorder": "#c62828", "actorLineColor": "#9e9e9e",
   "signalColor": "#424242",
   "noteBkgColor": "#fff8e1", "noteBorderColor": "#bfa14a", "labelBoxBkgColor": "#f5f5f5",
   "edgeLabelBackground": "#ffffff"},
 "flowchart": {"htmlLabels": false, "useMaxWidth": false, "padding": 12, "diagramPadding": 8},
 "sequence": {"useMaxWidth": false, "mirrorActors": false, "actorMargin": 40,
   "width": 130, "diagramMarginX": 16, "diagramMarginY": 8,
   "noteMargin": 8, "boxMargin": 8, "messageMargin": 32, "wrap": false}}
JSON

if [ $# = 0 ]; then
  set -- docs/diagrams/*.mmd
fi
for source in "$@"; do
  name=$(basename "$source" .mmd)
  "$tools/node_modules/.bin/mmdc" --quiet -p "$work/puppeteer.json" -c "$work/mermaid.json" \
    -b white --svgId "$name" -i "docs/diagrams/$name.mmd" -o "$work/$name.svg"
  if grep -q '<foreignObject' "$work/$name.svg"; then
    echo "docs-diagrams: $name.svg has HTML labels (<foreignObject>), which some viewers drop" >&2
    exit 1
  fi
  mv "$work/$name.svg" "docs/img/$name.svg"
  size=$(grep -o '<svg[^>]*' "docs/img/$name.svg" | grep -o ' \(width\|height\)="[0-9.]*"' | tr -dc '0-9. ')
  read -r width height <<<"$size"
  note=""
  if [ "${width%.*}" -gt "$CONTENT_WIDTH" ]; then
    note=" (wider than the page's $CONTENT_WIDTH px: shown smaller)"
  fi
  echo "docs/img/$name.svg: ${width%.*} x ${height%.*} px$note"
done
