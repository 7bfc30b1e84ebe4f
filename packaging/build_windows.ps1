<#
.SYNOPSIS
  Build Gambit for Windows (x64): the PyInstaller folder and an Inno Setup installer,
  dist\Gambit-<version>-windows-x64-<variant>-setup.exe, CPU or CUDA variant.

.DESCRIPTION
  NOT RUN where this was written (Linux only): written for the GitHub Actions
  windows-2022 runner (see .github/workflows/installers.yml), untested.

  Needs: Python >= 3.10 (py / python on PATH), Visual Studio Build Tools (C++),
  CMake, Inno Setup 6.3+ (iscc.exe); for -Variant cuda the CUDA toolkit (nvcc on
  PATH, CUDA_PATH set). The CUDA runtime DLLs (cudart, cublas) are bundled.

  The self-test runs the bundled gambit-cli.exe (a console program: gambit.exe is
  windowed and has no console to print to). A CUDA build needs an NVIDIA driver to
  start at all, so -SkipSelfTest is how CI builds it on a runner without a GPU.

.EXAMPLE
  powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1 -Variant cpu
  powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1 -Variant cuda -SkipSelfTest
#>
[CmdletBinding()]
param(
    [ValidateSet("cpu", "cuda")] [string] $Variant = "cpu",
    [switch] $Clean,
    [switch] $SkipSelfTest,
    [string] $PyInstallerVersion = "6.22.3"
)

Set-StrictMode -Version Latest
$ErrorActionPreference = "Stop"
$PSNativeCommandUseErrorActionPreference = $true

function Step([string] $Message) { Write-Host "`n== $Message ($(Get-Date -Format HH:mm:ss))" }
function Invoke-Checked([string] $Exe, [string[]] $Arguments) {
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "$Exe $($Arguments -join ' ') failed with exit code $LASTEXITCODE" }
}

$Root = (Resolve-Path (Join-Path $PSScriptRoot "..")).Path
Set-Location $Root
$Version = ([regex]::Match((Get-Content "app\gambit\__init__.py" -Raw), '__version__ = "([^"]+)"')).Groups[1].Value
$LlamaVersion = ([regex]::Match((Get-Content "pyproject.toml" -Raw), '"llama-cpp-python==([^"]+)"')).Groups[1].Value
if (-not $Version -or -not $LlamaVersion) { throw "cannot read the versions" }

$Venv = if ($env:GAMBIT_BUILD_VENV) { $env:GAMBIT_BUILD_VENV } else { Join-Path $Root "build\venv-windows-$Variant" }
$Work = Join-Path $Root "build\windows-$Variant"
$Dist = Join-Path $Root "dist"
if (-not $env:CMAKE_ARGS) {
    # GGML_NATIVE=OFF: portable AVX2 code rather than the build machine's own CPU.
    $env:CMAKE_ARGS = if ($Variant -eq "cuda") { "-DGGML_CUDA=on -DGGML_NATIVE=OFF -DGGML_RPC=ON -DLLAVA_BUILD=OFF" } else { "-DGGML_NATIVE=OFF -DGGML_RPC=ON -DLLAVA_BUILD=OFF" }
}
$Started = Get-Date

if ($Clean) { Remove-Item -Recurse -Force -ErrorAction SilentlyContinue $Venv, $Work }

Step "build environment: $Venv"
if (-not (Test-Path "$Venv\Scripts\python.exe")) {
    $Launcher = if (Get-Command py -ErrorAction SilentlyContinue) { "py" } else { "python" }
    Invoke-Checked $Launcher @("-m", "venv", $Venv)
}
$Py = "$Venv\Scripts\python.exe"
Invoke-Checked $Py @("-m", "pip", "install", "--quiet", "--upgrade", "pip")
$Stamp = "$Venv\.gambit-llama-build"
$Want = "$LlamaVersion $($env:CMAKE_ARGS)"
$Have = if (Test-Path $Stamp) { Get-Content $Stamp -Raw } else { "" }
if ($Have -ne $Want) {
    Step "llama-cpp-python $LlamaVersion from source, CMAKE_ARGS=$($env:CMAKE_ARGS) (minutes)"
    Invoke-Checked $Py @("-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps",
        "--no-cache-dir", "--no-binary", "llama-cpp-python", "llama-cpp-python==$LlamaVersion")
}
# Reinstall Gambit itself (same version, new dependencies?), then what it needs.
Invoke-Checked $Py @("-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", $Root)
Invoke-Checked $Py @("-m", "pip", "install", "--quiet", $Root, "pyinstaller==$PyInstallerVersion")
Set-Content -NoNewline -Path $Stamp -Value $Want

Step "PyInstaller"
if (Test-Path "$Work\dist") { Remove-Item -Recurse -Force "$Work\dist" }
Invoke-Checked $Py @("-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
    "--distpath", "$Work\dist", "--workpath", "$Work\pyinstaller", "packaging\gambit.spec")
$Bundle = "$Work\dist\gambit"
foreach ($Exe in @("gambit.exe", "gambit-cli.exe", "gambit-worker.exe")) {
    if (-not (Test-Path "$Bundle\$Exe")) { throw "PyInstaller made no $Bundle\$Exe" }
}

if (-not $SkipSelfTest) {
    Step "self-test of the bundle"
    $env:GAMBIT_HOME = "$Work\selftest-home"
    $env:QT_QPA_PLATFORM = "offscreen"
    Invoke-Checked "$Bundle\gambit-cli.exe" @("--self-test")
    # The worker imports llama.cpp before argparse answers: a missing library shows.
    Invoke-Checked "$Bundle\gambit-worker.exe" @("--help")
    Remove-Item Env:\GAMBIT_HOME, Env:\QT_QPA_PLATFORM
}

Step "Inno Setup installer"
$Iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
if (-not $Iscc) {
    $Iscc = @("${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe", "$env:ProgramFiles\Inno Setup 6\ISCC.exe") |
        Where-Object { Test-Path $_ } | Select-Object -First 1
}
if (-not $Iscc) { throw "Inno Setup 6 (ISCC.exe) not found: install it (choco install innosetup)" }
New-Item -ItemType Directory -Force $Dist | Out-Null
Invoke-Checked $Iscc @("/Qp", "/DAppVersion=$Version", "/DVariant=$Variant", "/DSourceDir=$Bundle",
    "/DOutputDir=$Dist", "packaging\gambit.iss")
$Setup = "$Dist\Gambit-$Version-windows-x64-$Variant-setup.exe"

Step "done in $([int]((Get-Date) - $Started).TotalSeconds) s"
$FolderMB = [math]::Round(((Get-ChildItem -Recurse -File $Bundle | Measure-Object Length -Sum).Sum) / 1MB)
Write-Host ("folder     {0} MB  {1}" -f $FolderMB, $Bundle)
Write-Host ("installer  {0} MB  {1}" -f [math]::Round((Get-Item $Setup).Length / 1MB), $Setup)
