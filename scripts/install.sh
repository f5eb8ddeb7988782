#!/usr/bin/env bash
# Installs the `fireopal` command and the in-tree plugins under a prefix:
#   <prefix>/bin/fireopal
#   <prefix>/lib/fireopal/libfireopal_<framework>_<name>.so
# The host searches <prefix>/lib/fireopal by itself (next to its bin/), so
# the installed command finds its plugins without FIREOPAL_PLUGIN_PATH, and
# plugins shipped separately go into the same directory.
#
# usage: scripts/install.sh --prefix DIR [--debug]
#   --debug   install the debug build (the tests use it; default: release)
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=""
profile="release"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        --debug) profile="debug"; shift ;;
        *) echo "install.sh: unknown argument $1" >&2
           echo "usage: scripts/install.sh --prefix DIR [--debug]" >&2
           exit 2 ;;
    esac
done
if [ -z "$prefix" ]; then
    echo "usage: scripts/install.sh --prefix DIR [--debug]" >&2
    exit 2
fi

build=(cargo build --workspace --lib --bin fireopal)
[ "$profile" = release ] && build+=(--release)
"${build[@]}"

target="${CARGO_TARGET_DIR:-target}/$profile"
plugins=("$target"/libfireopal_*.so)
if [ ! -e "${plugins[0]}" ]; then
    echo "install.sh: no plugin libraries in $target" >&2
    exit 1
fi
install -d "$prefix/bin" "$prefix/lib/fireopal"
install -m 755 "$target/fireopal" "$prefix/bin/fireopal"
for so in "${plugins[@]}"; do
    install -m 755 "$so" "$prefix/lib/fireopal/"
done
echo "installed $prefix/bin/fireopal and ${#plugins[@]} plugins in $prefix/lib/fireopal"
