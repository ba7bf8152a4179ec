#!/usr/bin/env bash
# Builds almanac's release: one archive per target (binary, README, LICENSE, CHANGELOG, shell
# completions, man pages), SHA256SUMS, the Homebrew formula and the npm packages, all into one
# directory. Runs on an x86-64 Linux machine; docs/releasing.md says what it needs and how a release
# is published.
#
#   scripts/release.sh [--out DIR] [--target TRIPLE]... [--base URL] [--allow-dirty]
#
# --target    build only these targets (repeatable; default: all five). The x86-64 Linux binary is
#             always built: it writes every archive's completions and man pages.
# --base      where the archives will be downloaded from, written into the Homebrew formula
#             (default: the GitHub release of this version).
# --allow-dirty  build from a checkout with uncommitted changes (the binary names HEAD's commit all
#             the same, so a real release never uses it).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-gnu)
OUT=dist
BASE=
ALLOW_DIRTY=0
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --target) TARGETS+=("${2:?--target needs a target triple}"); shift 2 ;;
    --base) BASE="${2:?--base needs a URL}"; shift 2 ;;
    --allow-dirty) ALLOW_DIRTY=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
  case " ${ALL_TARGETS[*]} " in *" $t "*) ;; *)
    echo "release: $t is not a release target (one of: ${ALL_TARGETS[*]})" >&2; exit 2 ;;
  esac
done
# The host binary first: it renders the completions and man pages.
case " ${TARGETS[*]} " in *" x86_64-unknown-linux-gnu "*) ;; *) TARGETS=(x86_64-unknown-linux-gnu "${TARGETS[@]}") ;; esac
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "release: runs on x86-64 Linux (this is $(uname -s) $(uname -m))" >&2; exit 1
fi

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$VERSION" ] || { echo "release: no version in Cargo.toml" >&2; exit 1; }
BASE="${BASE:-https://github.com/codealmanac/almanac/releases/download/v$VERSION}"
if [ -z "${ALMANAC_COMMIT:-}" ]; then
  ALMANAC_COMMIT=$(git rev-parse --short=12 HEAD)
  if [ "$ALLOW_DIRTY" = 0 ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "release: the checkout has uncommitted changes, which the binary would not name; commit them or pass --allow-dirty" >&2
    exit 1
  fi
fi
export ALMANAC_COMMIT
# Archives are reproducible: their files' times are the commit's.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH

need() { command -v "$1" >/dev/null 2>&1 || { echo "release: $1 is not on PATH ($2)" >&2; exit 1; }; }
need cargo-zigbuild "pip install cargo-zigbuild ziglang, then put that environment's bin on PATH"
need npm "Node's npm packs the npm packages"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"

# The binary of one target, built for the oldest systems the release supports: glibc 2.17 on Linux,
# macOS 11 (Apple silicon) and 10.12 (Intel), linked by zig with no macOS SDK; Windows by mingw-w64.
build() {
  local t=$1
  case "$t" in
    *-linux-gnu) cargo zigbuild --release --locked --target "$t.2.17" --bin almanac ;;
    aarch64-apple-darwin) MACOSX_DEPLOYMENT_TARGET=11.0 cargo zigbuild --release --locked --target "$t" --bin almanac ;;
    x86_64-apple-darwin) MACOSX_DEPLOYMENT_TARGET=10.12 cargo zigbuild --release --locked --target "$t" --bin almanac ;;
    x86_64-pc-windows-gnu)
      need x86_64-w64-mingw32-gcc "Debian's gcc-mingw-w64-x86-64 links the Windows build"
      CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
        cargo build --release --locked --target "$t" --bin almanac ;;
  esac
}
exe_of() { case "$1" in *windows*) echo almanac.exe ;; *) echo almanac ;; esac; }

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for t in "${TARGETS[@]}"; do
  echo "release: building $t"
  build "$t"
done
HOST="$TARGET_DIR/x86_64-unknown-linux-gnu/release/almanac"
"$HOST" --version | grep -qF "almanac $VERSION (commit $ALMANAC_COMMIT)" \
  || { echo "release: $HOST --version does not say $VERSION and $ALMANAC_COMMIT" >&2; exit 1; }

# What every archive holds beside the binary.
EXTRA="$WORK/extra"
mkdir -p "$EXTRA/completions" "$EXTRA/man"
cp README.md LICENSE CHANGELOG.md "$EXTRA/"
"$HOST" completions bash >"$EXTRA/completions/almanac.bash"
"$HOST" completions zsh >"$EXTRA/completions/_almanac"
"$HOST" completions fish >"$EXTRA/completions/almanac.fish"
"$HOST" completions powershell >"$EXTRA/completions/_almanac.ps1"
"$HOST" man --out "$EXTRA/man" >/dev/null

for t in "${TARGETS[@]}"; do
  name="almanac-$t"
  stage="$WORK/$name"
  cp -R "$EXTRA" "$stage"
  install -m 0755 "$TARGET_DIR/$t/release/$(exe_of "$t")" "$stage/$(exe_of "$t")"
  find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  case "$t" in
    *windows*)
      (cd "$WORK" && find "$name" -print | LC_ALL=C sort | zip -q -X -@ "$OUT/$name.zip") ;;
    *)
      tar -C "$WORK" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        -cf - "$name" | gzip -n -9 >"$OUT/$name.tar.gz" ;;
  esac
done
(
  cd "$OUT"
  for a in almanac-*.tar.gz almanac-*.zip; do if [ -f "$a" ]; then sha256sum "$a"; fi; done >SHA256SUMS
)
# The installers are published beside the archives (their one-liners fetch them from the release).
cp scripts/install.sh scripts/install.ps1 "$OUT/"
[ -s "$OUT/SHA256SUMS" ] || { echo "release: no archives were made" >&2; exit 1; }

# The Homebrew formula, when the four Unix archives are all here.
sha_of() { awk -v f="almanac-$1.tar.gz" '$2 == f { print $1 }' "$OUT/SHA256SUMS"; }
if [ -n "$(sha_of aarch64-apple-darwin)" ] && [ -n "$(sha_of x86_64-apple-darwin)" ] \
  && [ -n "$(sha_of aarch64-unknown-linux-gnu)" ] && [ -n "$(sha_of x86_64-unknown-linux-gnu)" ]; then
  sed -e "s|@VERSION@|$VERSION|g" -e "s|@BASE@|$BASE|g" \
    -e "s|@SHA_MAC_ARM@|$(sha_of aarch64-apple-darwin)|" -e "s|@SHA_MAC_INTEL@|$(sha_of x86_64-apple-darwin)|" \
    -e "s|@SHA_LINUX_ARM@|$(sha_of aarch64-unknown-linux-gnu)|" -e "s|@SHA_LINUX_INTEL@|$(sha_of x86_64-unknown-linux-gnu)|" \
    packaging/homebrew/almanac.rb.in >"$OUT/almanac.rb"
else
  echo "release: not all four Unix targets were built, so no Homebrew formula"
fi

# The npm packages: one per target holding its binary, and `codealmanac`, whose launcher runs the
# binary of the platform npm installed (each is an optional dependency limited to its os and cpu).
npm_platform() {
  case "$1" in
    x86_64-unknown-linux-gnu) echo "linux x64" ;;
    aarch64-unknown-linux-gnu) echo "linux arm64" ;;
    aarch64-apple-darwin) echo "darwin arm64" ;;
    x86_64-apple-darwin) echo "darwin x64" ;;
    x86_64-pc-windows-gnu) echo "win32 x64" ;;
  esac
}
mkdir -p "$OUT/npm"
for t in "${TARGETS[@]}"; do
  read -r os cpu <<<"$(npm_platform "$t")"
  pkg="$WORK/npm/codealmanac-$os-$cpu"
  mkdir -p "$pkg/bin"
  install -m 0755 "$TARGET_DIR/$t/release/$(exe_of "$t")" "$pkg/bin/$(exe_of "$t")"
  cp LICENSE "$pkg/"
  libc=; [ "$os" = linux ] && libc=', "libc": ["glibc"]'
  cat >"$pkg/package.json" <<EOF
{
  "name": "codealmanac-$os-$cpu",
  "version": "$VERSION",
  "description": "The almanac binary for $os $cpu (installed by the codealmanac package)",
  "license": "MIT",
  "repository": { "type": "git", "url": "git+https://github.com/codealmanac/almanac.git" },
  "os": ["$os"], "cpu": ["$cpu"]$libc,
  "files": ["bin/", "LICENSE"]
}
EOF
  echo "The almanac $VERSION binary for $os $cpu. Install \`codealmanac\`, which picks this package on this platform." \
    >"$pkg/README.md"
  (cd "$pkg" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)
done
main="$WORK/npm/codealmanac"
cp -R packaging/npm/codealmanac "$main"
cp LICENSE "$main/"
node -e '
  const fs = require("fs"), [file, version] = process.argv.slice(1);
  const p = JSON.parse(fs.readFileSync(file, "utf8"));
  p.version = version;
  for (const k of Object.keys(p.optionalDependencies)) p.optionalDependencies[k] = version;
  fs.writeFileSync(file, JSON.stringify(p, null, 2) + "\n");
' "$main/package.json" "$VERSION"
(cd "$main" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)

echo "release: almanac $VERSION (commit $ALMANAC_COMMIT) in $OUT:"
(cd "$OUT" && find . -type f | sed 's|^\./|  |' | LC_ALL=C sort)
