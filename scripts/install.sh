#!/usr/bin/env bash
# Installs the `fireopal` command and the in-tree plugins under a prefix:
#   <prefix>/bin/fireopal
#   <prefix>/lib/fireopal/libfireopal_<framework>_<name>.so
# The host searches <prefix>/lib/fireopal by itself (next to its bin/), so
# the installed command finds its plugins without FIREOPAL_PLUGIN_PATH, and
# plugins shipped separately go into the same directory.
#
# The build keeps its debug info (the release profile has debug = 1, for
# profiling); the installed files carry none: by default it is stripped
# (the symbol table stays, so backtraces and profilers still name
# functions), with --split-debug it goes to a .debug/ directory beside
# each file, named by a .gnu_debuglink that gdb and backtraces follow.
#
# usage: scripts/install.sh --prefix DIR [--debug] [--split-debug | --no-strip]
#   --debug         install the debug build (the tests use it; default: release)
#   --split-debug   keep the debug info in <dir>/.debug/<file>.debug
#   --no-strip      install the files as built
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/install.sh --prefix DIR [--debug] [--split-debug | --no-strip]"
prefix=""
profile="release"
debuginfo="strip"
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        --debug) profile="debug"; shift ;;
        --split-debug) debuginfo="split"; shift ;;
        --no-strip) debuginfo="keep"; shift ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) echo "install.sh: unknown argument $1" >&2
           echo "$usage" >&2
           exit 2 ;;
    esac
done
if [ -z "$prefix" ]; then
    echo "$usage" >&2
    exit 2
fi
if [ "$debuginfo" != keep ] && ! command -v objcopy >/dev/null; then
    echo "install.sh: objcopy not found (Debian: binutils); or pass --no-strip" >&2
    exit 2
fi

# install_file SRC DIR: copies SRC into DIR, then strips or splits it.
install_file() {
    local dest
    dest="$2/$(basename "$1")"
    install -m 755 "$1" "$dest"
    case "$debuginfo" in
        strip) objcopy --strip-debug "$dest" ;;
        split)
            local debug
            debug="$2/.debug/$(basename "$1").debug"
            install -d "$2/.debug"
            objcopy --only-keep-debug "$dest" "$debug"
            chmod 644 "$debug"
            objcopy --strip-debug --add-gnu-debuglink="$debug" "$dest" ;;
    esac
}

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
install_file "$target/fireopal" "$prefix/bin"
for so in "${plugins[@]}"; do
    install_file "$so" "$prefix/lib/fireopal"
done
case "$debuginfo" in
    strip) note="debug info stripped" ;;
    split) note="debug info in .debug/ beside each file" ;;
    keep) note="as built" ;;
esac
echo "installed $prefix/bin/fireopal and ${#plugins[@]} plugins in $prefix/lib/fireopal ($note)"
