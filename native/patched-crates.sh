#!/bin/sh
# Unpacks the pinned rdkafka-sys crate (the librdkafka sources it builds) into native/vendor and
# applies native/patches/rdkafka-sys/*.patch; Cargo.toml's [patch.crates-io] builds from there.
# Idempotent: a stamp names the crate version and the patches' checksum, so a rerun with nothing
# changed does nothing and a changed patch set unpacks afresh. The crate comes from Cargo's download
# cache when it is there, else from crates.io, and must match the checksum pinned below.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
name=rdkafka-sys
version=4.10.0+2.12.1
sha256=e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77
dest="$here/vendor/$name"
patches="$here/patches/$name"
need() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "$tool is required to patch the $name crate" >&2; exit 1; }
    done
}
need sha256sum
want="$version $(cat "$patches"/*.patch | sha256sum | cut -d' ' -f1)"
if [ -f "$dest/.patched" ] && [ "$(cat "$dest/.patched")" = "$want" ]; then
    exit 0
fi
need patch tar
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" 2>/dev/null | head -n 1 || true)
if [ -z "$crate" ]; then
    crate="$work/$name-$version.crate"
    curl -sSfL --retry 3 -o "$crate" "https://static.crates.io/crates/$name/$name-$version.crate"
fi
echo "$sha256  $crate" | sha256sum -c --quiet - || { echo "$crate: checksum mismatch" >&2; exit 1; }
tar -xzf "$crate" -C "$work"
for p in "$patches"/*.patch; do
    patch -s -p0 -d "$work/$name-$version" < "$p"
done
echo "$want" > "$work/$name-$version/.patched"
rm -rf "$dest"
mkdir -p "$here/vendor"
mv "$work/$name-$version" "$dest"
echo "patched $name $version into $dest"
