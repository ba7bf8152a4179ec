#!/usr/bin/env bash
# Builds the release with scripts/release.sh and checks what a user would get from it (docs/releasing.md):
# - every archive holds the binary, README, LICENSE, CHANGELOG, completions and man pages, and
#   SHA256SUMS matches them;
# - the x86-64 Linux binary runs `--version` (version and commit) and `rules validate`, and the arm64
#   one is an arm64 ELF;
# - the macOS binaries are Mach-O for their CPU, ask for the promised macOS, load only system libraries
#   and carry a valid signature (scripts/check_macho.py);
# - the shell installer installs from a local web server and from a directory into a scratch HOME, and
#   refuses a damaged archive;
# - the npm packages install from their tarballs, globally into a scratch prefix and into a project for
#   `npx almanac`, and run the Linux binary; published to a local registry (verdaccio, named by
#   ALMANAC_VERDACCIO), `npm install -g codealmanac` takes the Linux x64 package and no other;
# - the Homebrew formula names each archive with its checksum and installs from it
#   (scripts/check_formula.rb);
# and leaves the Windows archive's almanac.exe in DIST for the wine smoke suite.
#
#   scripts/check_release.sh DIST
set -euo pipefail
cd "$(dirname "$0")/.."
DIST="${1:?usage: check_release.sh DIST}"
fail() { echo "check_release: $*" >&2; exit 1; }
# A TCP port free on 127.0.0.1, for a local server.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits up to 10 s for URL to answer; whether it did.
answers() {
  for _ in $(seq 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
COMMIT=$(git rev-parse --short=12 HEAD)
scripts/release.sh --out "$DIST"
DIST=$(cd "$DIST" && pwd)
SCRATCH=$(mktemp -d)
SERVER=
REGISTRY=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null
  [ -n "$REGISTRY" ] && kill "$REGISTRY" 2>/dev/null
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the archives"
for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-gnu; do
  dir="$SCRATCH/unpacked/$t"
  mkdir -p "$dir"
  case "$t" in
    *windows*) unzip -q "$DIST/almanac-$t.zip" -d "$dir"; exe=almanac.exe ;;
    *) tar -xzf "$DIST/almanac-$t.tar.gz" -C "$dir"; exe=almanac ;;
  esac
  top="$dir/almanac-$t"
  for f in "$exe" README.md LICENSE CHANGELOG.md completions/almanac.bash completions/_almanac \
    completions/almanac.fish completions/_almanac.ps1 man/almanac.1 man/almanac-capture-sweep.1; do
    [ -f "$top/$f" ] || fail "almanac-$t lacks $f"
  done
  [ "$(ls "$dir")" = "almanac-$t" ] || fail "almanac-$t has more than one top-level entry"
done
U="$SCRATCH/unpacked"
got=$("$U/x86_64-unknown-linux-gnu/almanac-x86_64-unknown-linux-gnu/almanac" --version)
[ "$got" = "almanac $VERSION (commit $COMMIT)" ] || fail "the Linux binary says '$got'"
HOME="$SCRATCH/home" "$U/x86_64-unknown-linux-gnu/almanac-x86_64-unknown-linux-gnu/almanac" rules validate >/dev/null \
  || fail "the Linux binary's rules validate failed"
file -b "$U/aarch64-unknown-linux-gnu/almanac-aarch64-unknown-linux-gnu/almanac" | grep -q 'ELF 64-bit LSB .*ARM aarch64' \
  || fail "the arm64 Linux binary is not an arm64 ELF"
file -b "$U/aarch64-apple-darwin/almanac-aarch64-apple-darwin/almanac" | grep -q '^Mach-O 64-bit arm64 executable' \
  || fail "the Apple silicon binary is not Mach-O arm64"
file -b "$U/x86_64-apple-darwin/almanac-x86_64-apple-darwin/almanac" | grep -q '^Mach-O 64-bit x86_64 executable' \
  || fail "the Intel Mac binary is not Mach-O x86_64"
python3 scripts/check_macho.py "$U/aarch64-apple-darwin/almanac-aarch64-apple-darwin/almanac" --arch arm64 --min-os 11.0
python3 scripts/check_macho.py "$U/x86_64-apple-darwin/almanac-x86_64-apple-darwin/almanac" --arch x86_64 --min-os 10.12
file -b "$U/x86_64-pc-windows-gnu/almanac-x86_64-pc-windows-gnu/almanac.exe" | grep -q '^PE32+ executable.*x86-64' \
  || fail "the Windows binary is not a PE32+ x86-64 executable"
for f in install.sh install.ps1; do [ -f "$DIST/$f" ] || fail "$f is not in $DIST"; done

# The shell installer, from a local web server, into a scratch HOME whose bin is not on PATH.
port=$(free_port)
python3 -m http.server --bind 127.0.0.1 --directory "$DIST" "$port" >"$SCRATCH/http.log" 2>&1 &
SERVER=$!
answers "http://127.0.0.1:$port/SHA256SUMS" || fail "the local web server did not start: $(cat "$SCRATCH/http.log")"
H="$SCRATCH/installer-home"
mkdir -p "$H"
out=$(env -i HOME="$H" PATH=/usr/bin:/bin SHELL=/bin/bash ALMANAC_DOWNLOAD_BASE="http://127.0.0.1:$port" sh "$DIST/install.sh")
printf '%s\n' "$out"
[ "$("$H/.local/bin/almanac" --version)" = "almanac $VERSION (commit $COMMIT)" ] || fail "the installed binary does not run"
if ! grep -q "is not on your PATH" <<<"$out" || ! grep -qF "export PATH=\"$H/.local/bin:\$PATH\"" <<<"$out"; then
  fail "the installer did not say how to put ~/.local/bin on PATH"
fi
# Again, from a directory, with the directory on PATH: it replaces the binary and says nothing of PATH.
out=$(env -i HOME="$H" PATH="$H/.local/bin:/usr/bin:/bin" ALMANAC_DOWNLOAD_BASE="$DIST" sh "$DIST/install.sh")
! grep -q "not on your PATH" <<<"$out" || fail "the installer asked to change a PATH that has the directory"
# A damaged archive is refused, and what was installed stays.
bad="$SCRATCH/bad"
mkdir -p "$bad"
cp "$DIST/SHA256SUMS" "$DIST/almanac-x86_64-unknown-linux-gnu.tar.gz" "$bad/"
printf 'x' | dd of="$bad/almanac-x86_64-unknown-linux-gnu.tar.gz" bs=1 seek=100 conv=notrunc 2>/dev/null
H2="$SCRATCH/installer-home-2"
mkdir -p "$H2"
if err=$(env -i HOME="$H2" PATH=/usr/bin:/bin ALMANAC_DOWNLOAD_BASE="$bad" sh "$DIST/install.sh" 2>&1); then
  fail "the installer accepted a damaged archive"
fi
grep -q "SHA256SUMS says" <<<"$err" || fail "the installer's refusal does not name the checksum: $err"
[ ! -e "$H2/.local/bin/almanac" ] || fail "the installer installed a damaged archive"

# The npm packages: a global install into a scratch prefix, and `npx almanac` in a project.
NPM_OPTS=(--no-audit --no-fund --no-update-notifier --loglevel=error --cache "$SCRATCH/npm-cache")
tgz_main="$DIST/npm/codealmanac-$VERSION.tgz"
tgz_linux="$DIST/npm/codealmanac-linux-x64-$VERSION.tgz"
P="$SCRATCH/npm-prefix"
npm install -g "${NPM_OPTS[@]}" --prefix "$P" "$tgz_linux" "$tgz_main"
[ "$(HOME="$SCRATCH/home" "$P/bin/almanac" --version)" = "almanac $VERSION (commit $COMMIT)" ] \
  || fail "the npm global install's almanac does not run"
[ -x "$P/lib/node_modules/codealmanac/node_modules/codealmanac-linux-x64/bin/almanac" ] \
  || [ -x "$P/lib/node_modules/codealmanac-linux-x64/bin/almanac" ] || fail "npm did not install the Linux package"
proj="$SCRATCH/npm-project"
mkdir -p "$proj"
(cd "$proj" && npm init -y >/dev/null && npm install "${NPM_OPTS[@]}" "$tgz_linux" "$tgz_main" \
  && [ "$(HOME="$SCRATCH/home" npx --no-install almanac --version)" = "almanac $VERSION (commit $COMMIT)" ]) \
  || fail "npx almanac --version did not run the Linux binary"

# The npm packages as users get them: all six published to a local registry (verdaccio, offline, in
# scratch storage), then `npm install -g codealmanac` must take the one platform package whose os, cpu
# and libc fit this machine, and no other, and the launcher must run its binary.
VERDACCIO="${ALMANAC_VERDACCIO:-}"
[ -x "$VERDACCIO" ] || fail "ALMANAC_VERDACCIO must name verdaccio's binary (npm install --prefix DIR verdaccio@6; then DIR/node_modules/.bin/verdaccio) for the registry check"
REG_DIR="$SCRATCH/registry"
mkdir -p "$REG_DIR"
cat >"$REG_DIR/config.yaml" <<CONFIG
storage: $REG_DIR/storage
auth: { htpasswd: { file: $REG_DIR/htpasswd, max_users: -1 } }
uplinks: {}
packages: { '**': { access: \$all, publish: \$anonymous } }
log: { type: stdout, format: pretty, level: warn }
CONFIG
reg_port=$(free_port)
REG="http://127.0.0.1:$reg_port"
"$VERDACCIO" --config "$REG_DIR/config.yaml" --listen "127.0.0.1:$reg_port" >"$REG_DIR/log" 2>&1 &
REGISTRY=$!
answers "$REG/-/ping" || fail "verdaccio did not start: $(cat "$REG_DIR/log")"
# verdaccio lets anyone publish here; npm still wants a token to send.
REG_OPTS=("${NPM_OPTS[@]}" --registry "$REG" "--//127.0.0.1:$reg_port/:_authToken=local")
for tgz in "$DIST"/npm/codealmanac-*-"$VERSION".tgz "$tgz_main"; do
  npm publish "${REG_OPTS[@]}" "$tgz" >/dev/null || fail "npm publish $tgz to the local registry failed"
done
P2="$SCRATCH/npm-registry-prefix"
npm install -g "${REG_OPTS[@]}" --prefix "$P2" "codealmanac@$VERSION" \
  || fail "npm install -g codealmanac@$VERSION from the local registry failed"
[ "$(HOME="$SCRATCH/home" "$P2/bin/almanac" --version)" = "almanac $VERSION (commit $COMMIT)" ] \
  || fail "almanac installed from the registry does not run"
got=$(cd "$P2/lib/node_modules" && find . -name package.json -path '*/codealmanac-*/package.json' \
  | sed -E 's#.*/(codealmanac-[a-z0-9-]+)/package.json$#\1#' | sort -u | tr '\n' ' ')
[ "$got" = "codealmanac-linux-x64 " ] || fail "npm installed these platform packages: ${got:-none}; only codealmanac-linux-x64 fits"
# The README's way to try it without installing, outside any project.
mkdir -p "$SCRATCH/elsewhere"
[ "$(cd "$SCRATCH/elsewhere" && HOME="$SCRATCH/home" npx --yes "${REG_OPTS[@]}" "codealmanac@$VERSION" --version)" \
  = "almanac $VERSION (commit $COMMIT)" ] || fail "npx codealmanac --version did not run almanac"
kill "$REGISTRY" 2>/dev/null || true
REGISTRY=

# The Homebrew formula.
ruby scripts/check_formula.rb "$DIST/almanac.rb" "$DIST"
echo "check_release: almanac $VERSION (commit $COMMIT): all five archives, installers, npm and Homebrew checked"
