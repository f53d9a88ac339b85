#!/usr/bin/env bash
# Re-fetch the scripts the book serves itself instead of loading them from CDNs (README.md says
# why), from the npm registry, and print their sha256 so a change of bytes shows up in review.
# Usage: widgets_static/update.sh [html-manager version] [requirejs version] [mathjax version] [plotly.js version]
set -euo pipefail
html_manager=${1:-1.0.15}   # the 1.0.x line renders ipywidgets 8 widget state
requirejs=${2:-2.3.8}
mathjax=${3:-3.2.2}         # Sphinx 7 writes MathJax 3 configuration
plotly=${4:-4.1.1}          # the explorers (quantgemm_kernels/explorers.py): the basic bundle, scatter and bar
site="$(cd "$(dirname "$0")" && pwd)/site"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "@jupyter-widgets/html-manager@${html_manager}" "requirejs@${requirejs}" "mathjax@${mathjax}" \
    "plotly.js-basic-dist-min@${plotly}" >/dev/null

unpack() {  # unpack <tarball>: a clean package/ folder
    rm -rf package
    tar xzf "$1"
}

unpack "jupyter-widgets-html-manager-${html_manager}.tgz"
mkdir -p "$site/ipywidgets"
cp package/dist/embed-amd.js "$site/ipywidgets/embed-amd.js"
cp package/dist/embed.js.LICENSE.txt "$site/ipywidgets/LICENSE.third-party.txt"

unpack "requirejs-${requirejs}.tgz"
cp package/require.js "$site/ipywidgets/require.js"

# MathJax finds its fonts relative to its own script: keep es5/'s layout below mathjax/.
unpack "mathjax-${mathjax}.tgz"
rm -rf "$site/mathjax"
mkdir -p "$site/mathjax/output/chtml/fonts"
cp package/es5/tex-mml-chtml.js "$site/mathjax/"
cp -r package/es5/output/chtml/fonts/woff-v2 "$site/mathjax/output/chtml/fonts/"
cp package/LICENSE "$site/mathjax/LICENSE"

unpack "plotly.js-basic-dist-min-${plotly}.tgz"
mkdir -p "$site/plotly"
cp package/plotly-basic.min.js package/LICENSE "$site/plotly/"

cd "$site" && find . -name '*.js' -o -name '*.woff' | sort | xargs sha256sum
