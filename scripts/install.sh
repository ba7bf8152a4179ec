#!/bin/sh
# Installs the prebuilt almanac for this machine (Linux or macOS, x86-64 or arm64):
#
#   curl -fsSL https://github.com/codealmanac/almanac/releases/latest/download/install.sh | sh
#
# It downloads the release archive and SHA256SUMS, checks the archive's checksum, and puts the
# `almanac` binary in ~/.local/bin. Nothing else on the system is changed: if that directory is not
# on PATH, it says how to put it there.
#
# Environment:
#   ALMANAC_VERSION        a version to install, e.g. 0.1.0 (default: the latest release)
#   ALMANAC_DOWNLOAD_BASE  where the archives and SHA256SUMS are: a URL or a local directory
#                          (default: the GitHub release of ALMANAC_VERSION, or the latest)
#   ALMANAC_INSTALL_DIR    where the binary goes (default: ~/.local/bin)
set -eu

say() { printf 'almanac installer: %s\n' "$*"; }
die() { printf 'almanac installer: %s\n' "$*" >&2; exit 1; }

case "$(uname -s)" in
  Linux) os=unknown-linux-gnu ;;
  Darwin) os=apple-darwin ;;
  *) die "there is no prebuilt almanac for $(uname -s); on Windows run install.ps1, elsewhere build it: cargo install codealmanac" ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=x86_64 ;;
  aarch64 | arm64) arch=aarch64 ;;
  *) die "there is no prebuilt almanac for $(uname -m) processors; build it: cargo install codealmanac" ;;
esac
# An Intel shell under Rosetta on Apple silicon gets the native build.
if [ "$os" = apple-darwin ] && [ "$arch" = x86_64 ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || true)" = 1 ]; then
  arch=aarch64
fi
if [ "$os" = unknown-linux-gnu ] && ldd --version 2>&1 | grep -qi musl; then
  die "the prebuilt Linux almanac needs glibc 2.17 or later and this system uses musl; build it: cargo install codealmanac"
fi
target="$arch-$os"
archive="almanac-$target.tar.gz"

if [ -n "${ALMANAC_DOWNLOAD_BASE:-}" ]; then
  base="${ALMANAC_DOWNLOAD_BASE%/}"
elif [ -n "${ALMANAC_VERSION:-}" ]; then
  base="https://github.com/codealmanac/almanac/releases/download/v${ALMANAC_VERSION#v}"
else
  base="https://github.com/codealmanac/almanac/releases/latest/download"
fi
dest="${ALMANAC_INSTALL_DIR:-${HOME:?HOME is not set}/.local/bin}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/almanac-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# fetch NAME: copies $base/NAME into $tmp.
fetch() {
  if [ -d "$base" ]; then
    [ -f "$base/$1" ] || die "$base/$1 does not exist"
    cp "$base/$1" "$tmp/$1"
  elif command -v curl >/dev/null 2>&1; then
    curl --proto '=https,http,file' -fsSL --retry 2 -o "$tmp/$1" "$base/$1" || die "cannot download $base/$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$tmp/$1" "$base/$1" || die "cannot download $base/$1"
  else
    die "neither curl nor wget is installed; install one of them and run this again"
  fi
}

say "downloading $archive from $base"
fetch SHA256SUMS
fetch "$archive"

want=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/SHA256SUMS")
[ -n "$want" ] || die "SHA256SUMS at $base lists no $archive"
if command -v sha256sum >/dev/null 2>&1; then
  got=$(sha256sum "$tmp/$archive" | awk '{ print $1 }')
elif command -v shasum >/dev/null 2>&1; then
  got=$(shasum -a 256 "$tmp/$archive" | awk '{ print $1 }')
else
  die "neither sha256sum nor shasum is installed, so the download cannot be checked"
fi
[ "$got" = "$want" ] || die "$archive has checksum $got, but SHA256SUMS says $want: the download is damaged or was tampered with; nothing was installed"

tar -xzf "$tmp/$archive" -C "$tmp" || die "cannot unpack $archive"
bin="$tmp/almanac-$target/almanac"
[ -f "$bin" ] || die "$archive holds no almanac-$target/almanac"
"$bin" --version >/dev/null 2>&1 || die "the downloaded almanac does not run on this machine ($target)"

mkdir -p "$dest" || die "cannot create $dest"
# Copy beside the old binary, then rename over it: a sweep running the old one keeps running.
new="$dest/.almanac.new.$$"
if ! { cp "$bin" "$new" && chmod 0755 "$new" && mv -f "$new" "$dest/almanac"; }; then
  rm -f "$new"
  die "cannot write $dest/almanac"
fi
say "installed $("$dest/almanac" --version) as $dest/almanac"
say "shell completions: almanac completions bash|zsh|fish (the release archives also hold them and the man pages)"

case ":${PATH:-}:" in
  *":$dest:"*) ;;
  *)
    say "$dest is not on your PATH. To put it there:"
    case "$(basename "${SHELL:-sh}")" in
      zsh) say "  echo 'export PATH=\"$dest:\$PATH\"' >> ~/.zshrc && exec zsh" ;;
      bash) say "  echo 'export PATH=\"$dest:\$PATH\"' >> ~/.bashrc && exec bash" ;;
      fish) say "  fish_add_path $dest" ;;
      *) say "  add $dest to PATH in your shell's startup file" ;;
    esac
    ;;
esac
say "next: run \`almanac init\` in a repository, then \`almanac automation install\` (README \"First use\")"
