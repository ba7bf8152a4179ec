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
#   ALMANAC_DOWNLOAD_BASE  where the archives and SHA256SUMS are: a URL or a local directory
#                          (default: the GitHub release of ALMANAC_VERSION, or the latest)
#   ALMANAC_INSTALL_DIR    where almanac.exe goes (default: %LOCALAPPDATA%\Programs\almanac)
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
if ($env:ALMANAC_DOWNLOAD_BASE) {
  $base = $env:ALMANAC_DOWNLOAD_BASE.TrimEnd('/', '\')
} elseif ($env:ALMANAC_VERSION) {
  $base = "https://github.com/codealmanac/almanac/releases/download/v$($env:ALMANAC_VERSION.TrimStart('v'))"
} else {
  $base = 'https://github.com/codealmanac/almanac/releases/latest/download'
}
if ($env:ALMANAC_INSTALL_DIR) { $dest = $env:ALMANAC_INSTALL_DIR }
elseif ($env:LOCALAPPDATA) { $dest = Join-Path $env:LOCALAPPDATA 'Programs\almanac' }
else { Die 'LOCALAPPDATA is not set; set ALMANAC_INSTALL_DIR to the directory almanac.exe should go to' }

$tmp = Join-Path ([IO.Path]::GetTempPath()) ("almanac-install-" + [Guid]::NewGuid().ToString('N'))
New-Item -ItemType Directory -Path $tmp | Out-Null
try {
  function Fetch([string]$name) {
    $out = Join-Path $tmp $name
    if (Test-Path -LiteralPath $base -PathType Container) {
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
    Die "$archive has checksum $got, but SHA256SUMS says ${want}: the download is damaged or was tampered with; nothing was installed"
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
  if (-not $onPath) {
    Say "$dest is not on your PATH. To put it there (new terminals see it):"
    Say "  [Environment]::SetEnvironmentVariable('Path', `"$dest;`" + [Environment]::GetEnvironmentVariable('Path', 'User'), 'User')"
  }
  Say 'next: run `almanac init` in a repository, then `almanac automation install` (README "First use")'
} finally {
  Remove-Item -LiteralPath $tmp -Recurse -Force -ErrorAction SilentlyContinue
}
