# Installs the prebuilt almanac for Windows (x86-64; Windows on Arm runs it emulated):
#
#   irm https://github.com/codealmanac/almanac/releases/latest/download/install.ps1 | iex
#
# It downloads the release archive and SHA256SUMS, checks the archive's checksum, and puts
# almanac.exe in %LOCALAPPDATA%\Programs\almanac. Nothing else is changed: if that directory is not on
# PATH, it says how to put it there.
#
# Environment:
#   ALMANAC_VERSION        a version to install, e.g. 0.1.0 (default: the latest release)
#   ALMANAC_DOWNLOAD_BASE  where the archives and SHA256SUMS are: an https:// URL, or the full path
#                          of a local directory (C:\dist, \\server\share\dist) (default: the GitHub
#                          release of ALMANAC_VERSION, or the latest). Plain http:// is accepted only
#                          for 127.0.0.1, localhost and [::1], a server on this machine.
#   ALMANAC_INSTALL_DIR    where almanac.exe goes, a full path (default: %LOCALAPPDATA%\Programs\almanac)
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

function Say([string]$m) { Write-Host "almanac installer: $m" }
# An error is thrown, not `exit`ed: piped to iex, `exit` would close the user's PowerShell.
function Die([string]$m) { throw "almanac installer: $m" }

# Windows PowerShell 5.1 may still offer only TLS 1.0/1.1, which GitHub refuses.
[Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
# The one build is x86-64: 64-bit Windows on Intel/AMD runs it, and Windows 11 on Arm emulates it.
if ($env:PROCESSOR_ARCHITECTURE -eq 'x86' -and -not $env:PROCESSOR_ARCHITEW6432) {
  Die 'this is 32-bit Windows; almanac is built for 64-bit Windows only'
}
$archive = 'almanac-x86_64-pc-windows-gnu.zip'
# A full path: a drive and a separator (C:\x; not C:x, which is relative to C:'s current directory,
# nor \x, relative to the current drive), or a UNC path.
function Test-FullPath([string]$p) { $p -match '^[A-Za-z]:[\\/]' -or $p -match '^[\\/]{2}[^\\/]' }

# How the release files are read: 'https', 'http' (a server on this machine: the user named it) or
# 'dir' (a local directory the user named, by its full path). The built-in URLs are always 'https' and
# never looked up as paths, so no directory in the current location that looks like one is read.
$mode = 'https'
if ($env:ALMANAC_DOWNLOAD_BASE) {
  $base = $env:ALMANAC_DOWNLOAD_BASE
  if ($base -match '^https://.') {
    $base = $base.TrimEnd('/')
  } elseif ($base -match '^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/|$)') {
    # Plain http only to a loopback host (no user info, query or fragment before the path).
    $mode = 'http'
    $base = $base.TrimEnd('/')
  } elseif ($base -match '^http://') {
    Die "ALMANAC_DOWNLOAD_BASE is ${base}: plain http:// is accepted only from 127.0.0.1, localhost or [::1]; use an https:// URL"
  } elseif ($base -match '^[A-Za-z][A-Za-z0-9+.-]+://') {
    Die "ALMANAC_DOWNLOAD_BASE is ${base}: only https:// URLs (or http:// to this machine) are read"
  } elseif (Test-FullPath $base) {
    if (-not (Test-Path -LiteralPath $base -PathType Container)) { Die "ALMANAC_DOWNLOAD_BASE is $base, which is not a directory" }
    $mode = 'dir'
  } else {
    Die "ALMANAC_DOWNLOAD_BASE is $base, a relative path; give a local directory by its full path (e.g. C:\dist) or an https:// URL"
  }
} elseif ($env:ALMANAC_VERSION) {
  $version = $env:ALMANAC_VERSION.TrimStart('v')
  if ($version -notmatch '^[0-9A-Za-z.+-]+$') { Die "ALMANAC_VERSION is $($env:ALMANAC_VERSION), which is not a version (e.g. 0.1.0)" }
  $base = "https://github.com/codealmanac/almanac/releases/download/v$version"
} else {
  $base = 'https://github.com/codealmanac/almanac/releases/latest/download'
}
if ($env:ALMANAC_INSTALL_DIR) { $dest = $env:ALMANAC_INSTALL_DIR }
elseif ($env:LOCALAPPDATA) { $dest = Join-Path $env:LOCALAPPDATA 'Programs\almanac' }
else { Die 'LOCALAPPDATA is not set; set ALMANAC_INSTALL_DIR to the directory almanac.exe should go to' }
if (-not (Test-FullPath $dest)) { Die "the install directory $dest is not a full path; set ALMANAC_INSTALL_DIR (or LOCALAPPDATA) to one, e.g. C:\Tools\almanac" }

$tmp = Join-Path ([IO.Path]::GetTempPath()) ("almanac-install-" + [Guid]::NewGuid().ToString('N'))
New-Item -ItemType Directory -Path $tmp | Out-Null
try {
  function Fetch([string]$name) {
    $out = Join-Path $tmp $name
    if ($mode -eq 'dir') {
      $src = Join-Path $base $name
      if (-not (Test-Path -LiteralPath $src -PathType Leaf)) { Die "$src does not exist" }
      Copy-Item -LiteralPath $src -Destination $out
    } else {
      try { Invoke-WebRequest -UseBasicParsing -Uri "$base/$name" -OutFile $out }
      catch { Die "cannot download $base/${name}: $($_.Exception.Message)" }
    }
    $out
  }

  Say "downloading $archive from $base"
  $sums = Fetch 'SHA256SUMS'
  $zip = Fetch $archive
  $want = $null
  foreach ($line in Get-Content -LiteralPath $sums) {
    $f = $line -split '\s+', 2
    if ($f.Count -eq 2 -and ($f[1] -eq $archive -or $f[1] -eq "*$archive")) { $want = $f[0].ToLower(); break }
  }
  if (-not $want) { Die "SHA256SUMS at $base lists no $archive" }
  $got = (Get-FileHash -Algorithm SHA256 -LiteralPath $zip).Hash.ToLower()
  if ($got -ne $want) {
    Die "checksum mismatch: $base/$archive has SHA-256 $got, but SHA256SUMS says $want (the SHA256SUMS from $base); the download is damaged or was tampered with; nothing was installed"
  }

  Expand-Archive -LiteralPath $zip -DestinationPath $tmp
  $exe = Join-Path $tmp 'almanac-x86_64-pc-windows-gnu\almanac.exe'
  if (-not (Test-Path -LiteralPath $exe -PathType Leaf)) { Die "$archive holds no almanac-x86_64-pc-windows-gnu\almanac.exe" }

  New-Item -ItemType Directory -Force -Path $dest | Out-Null
  $target = Join-Path $dest 'almanac.exe'
  # A running almanac.exe cannot be overwritten but can be renamed: move it aside first.
  if (Test-Path -LiteralPath $target) {
    $old = "$target.old"
    Remove-Item -LiteralPath $old -Force -ErrorAction SilentlyContinue
    try { Move-Item -LiteralPath $target -Destination $old -Force }
    catch { Die "cannot replace ${target}: $($_.Exception.Message)" }
  }
  Copy-Item -LiteralPath $exe -Destination $target
  $version = & $target --version
  if ($LASTEXITCODE -ne 0 -or -not $version) { Die "$target was installed but does not run (exit code $LASTEXITCODE)" }
  Say "installed $version as $target"
  Say 'shell completions: almanac completions powershell (the release archive also holds them and the man pages)'

  $userPath = [Environment]::GetEnvironmentVariable('Path', 'User')
  $onPath = ($env:Path -split ';') + ($userPath -split ';') | Where-Object { $_ -and ($_.TrimEnd('\') -ieq $dest.TrimEnd('\')) }
  if ($dest.Contains(';')) {
    Say "$dest holds a ';', so it cannot be put on PATH; run almanac by its full path"
  } elseif (-not $onPath) {
    Say "$dest is not on your PATH. To put it there (new terminals see it):"
    # $dest in a single-quoted string, where nothing expands; PowerShell takes the curly quotes as
    # quotes too, so each quote of either kind is doubled.
    $lit = "'" + ($dest -replace '[''\u2018\u2019\u201A\u201B]', '$0$0') + ";'"
    Say "  [Environment]::SetEnvironmentVariable('Path', $lit + [Environment]::GetEnvironmentVariable('Path', 'User'), 'User')"
  }
  Say 'next: run `almanac init` in a repository, then `almanac automation install` (README "First use")'
} finally {
  Remove-Item -LiteralPath $tmp -Recurse -Force -ErrorAction SilentlyContinue
}
