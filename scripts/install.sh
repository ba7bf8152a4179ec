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
#   ALMANAC_DOWNLOAD_BASE  where the archives and SHA256SUMS are: an https:// URL, or the absolute
#                          path of a local directory (default: the GitHub release of ALMANAC_VERSION,
#                          or the latest). Plain http:// is accepted only for 127.0.0.1, localhost
#                          and [::1], a server on this machine, as the release checks use.
#   ALMANAC_INSTALL_DIR    where the binary goes, an absolute path (default: ~/.local/bin)
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

# How the release files are read: `https` (curl or wget, https only, TLS 1.2 or later), `http` (a
# server on this machine: the user named it), or `dir` (a local directory the user named, by its
# absolute path). The built-in URLs are always `https` and are never looked up as paths: the default
# URL is also a valid relative path (`https:` is a legal directory name and `//` collapses), so a
# cloned repository holding `https:/github.com/.../download/` must not be read when this runs in it.
mode=https
if [ -n "${ALMANAC_DOWNLOAD_BASE:-}" ]; then
  base="$ALMANAC_DOWNLOAD_BASE"
  case "$base" in
    https://?*) base="${base%/}" ;;
    http://?*)
      # Plain http only to a loopback host, with nothing that could make curl read another host
      # (user info, a query or fragment before the path): nobody else can swap the files there.
      hostport="${base#http://}"
      hostport="${hostport%%/*}"
      case "$hostport" in
        127.0.0.1 | localhost | '[::1]') ;;
        127.0.0.1:*[!0-9]* | localhost:*[!0-9]* | '[::1]:'*[!0-9]*) hostport= ;;
        127.0.0.1:?* | localhost:?* | '[::1]:'?*) ;;
        *) hostport= ;;
      esac
      [ -n "$hostport" ] || die "ALMANAC_DOWNLOAD_BASE is $base: plain http:// is accepted only from 127.0.0.1, localhost or [::1]; use an https:// URL"
      mode=http
      base="${base%/}"
      ;;
    /*)
      [ -d "$base" ] || die "ALMANAC_DOWNLOAD_BASE is $base, which is not a directory"
      mode=dir
      [ "$base" = / ] || base="${base%/}"
      ;;
    *://*) die "ALMANAC_DOWNLOAD_BASE is $base: only https:// URLs (or http:// to this machine) are read" ;;
    *) die "ALMANAC_DOWNLOAD_BASE is $base, a relative path; give a local directory by its absolute path (e.g. \"\$PWD/${base#./}\") or an https:// URL" ;;
  esac
elif [ -n "${ALMANAC_VERSION:-}" ]; then
  version="${ALMANAC_VERSION#v}"
  case "$version" in
    *[!0-9A-Za-z.+-]* | '') die "ALMANAC_VERSION is $ALMANAC_VERSION, which is not a version (e.g. 0.1.0)" ;;
  esac
  base="https://github.com/codealmanac/almanac/releases/download/v$version"
else
  base="https://github.com/codealmanac/almanac/releases/latest/download"
fi
dest="${ALMANAC_INSTALL_DIR:-${HOME:?HOME is not set}/.local/bin}"
case "$dest" in
  /*) ;;
  *) die "the install directory $dest is a relative path; set ALMANAC_INSTALL_DIR (or HOME) to an absolute one" ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/almanac-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# fetch NAME: copies $base/NAME into $tmp, the way $mode says.
fetch() {
  case "$mode" in
    dir)
      [ -f "$base/$1" ] || die "$base/$1 does not exist"
      cp "$base/$1" "$tmp/$1" || die "cannot copy $base/$1"
      return
      ;;
  esac
  if command -v curl >/dev/null 2>&1; then
    if [ "$mode" = https ]; then
      curl --proto '=https' --proto-redir '=https' --tlsv1.2 -fsSL --retry 2 -o "$tmp/$1" "$base/$1" \
        || die "cannot download $base/$1"
    else
      curl --proto '=http' --proto-redir '=http' -fsS --retry 2 -o "$tmp/$1" "$base/$1" \
        || die "cannot download $base/$1"
    fi
  elif command -v wget >/dev/null 2>&1; then
    if [ "$mode" = https ]; then
      # GNU wget's --https-only binds only recursive fetches; the URL here is https all the same, and
      # only that https server could redirect it. BusyBox's wget has neither option (and older ones
      # check no certificate): it is refused.
      wget --help 2>&1 | grep -q -- --https-only \
        || die "this wget cannot be limited to https (no --https-only; BusyBox's?); install curl or GNU wget 1.17 or later"
      wget --https-only --secure-protocol=TLSv1_2 -q -O "$tmp/$1" "$base/$1" || die "cannot download $base/$1"
    else
      wget -q -O "$tmp/$1" "$base/$1" || die "cannot download $base/$1"
    fi
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
[ "$got" = "$want" ] \
  || die "checksum mismatch: $base/$archive has SHA-256 $got, but SHA256SUMS says $want (the SHA256SUMS from $base); the download is damaged or was tampered with; nothing was installed"

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

# quote STRING: STRING in single quotes for a POSIX shell (bash, zsh): each ' becomes '\''.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
case "$dest" in
  *:*) say "$dest holds a ':', so it cannot be put on PATH; run almanac by its full path" ;;
  *)
    case ":${PATH:-}:" in
      *":$dest:"*) ;;
      *)
        say "$dest is not on your PATH. To put it there:"
        # The line for the startup file, with $dest in double quotes (\ " $ ` escaped), then that
        # line single-quoted for the shell the user pastes it into; printf, as zsh's echo reads \.
        dq=$(printf '%s' "$dest" | sed 's/[\\"$`]/\\&/g')
        line=$(quote "export PATH=\"$dq:\$PATH\"")
        case "$(basename "${SHELL:-sh}")" in
          zsh) say "  printf '%s\\n' $line >> ~/.zshrc && exec zsh" ;;
          bash) say "  printf '%s\\n' $line >> ~/.bashrc && exec bash" ;;
          # fish's single quotes take \\ and \' as escapes.
          fish) say "  fish_add_path '$(printf '%s' "$dest" | sed "s/[\\\\']/\\\\&/g")'" ;;
          *) say "  add $dest to PATH in your shell's startup file" ;;
        esac
        ;;
    esac
    ;;
esac
say "next: run \`almanac init\` in a repository, then \`almanac automation install\` (README \"First use\")"
