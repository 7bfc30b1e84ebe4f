; Inno Setup script for Gambit (Windows x64), CPU and CUDA variants.
; Built by packaging\build_windows.ps1, which passes:
;   iscc /DAppVersion=0.1.0 /DVariant=cpu /DSourceDir=<PyInstaller folder> /DOutputDir=<dist> packaging\gambit.iss
; NOT RUN where this was written (Linux only): untested, for the windows CI runner.
; Needs Inno Setup 6.3 or later (x64compatible).

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef Variant
  #define Variant "cpu"
#endif
#ifndef SourceDir
  #define SourceDir "..\build\windows-" + Variant + "\dist\gambit"
#endif
#ifndef OutputDir
  #define OutputDir "..\dist"
#endif

[Setup]
; One AppId for both variants: installing one replaces the other.
AppId={{5B0F5C8E-3E0A-4C55-9D7E-6A1C2B9E47A1}
AppName=Gambit
AppVersion={#AppVersion}
AppVerName=Gambit {#AppVersion} ({#Variant})
AppPublisher=Gambit developers
AppComments=Local LLM chat made faster by speculative decoding
VersionInfoVersion={#AppVersion}
DefaultDirName={autopf}\Gambit
DefaultGroupName=Gambit
DisableProgramGroupPage=yes
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#OutputDir}
OutputBaseFilename=Gambit-{#AppVersion}-windows-x64-{#Variant}-setup
SetupIconFile=..\resources\icons\gambit.ico
UninstallDisplayIcon={app}\gambit.exe
UninstallDisplayName=Gambit ({#Variant})
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; Leftovers of an older version's bundle (libraries that were renamed or dropped).
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Gambit"; Filename: "{app}\gambit.exe"; Comment: "Local LLM chat"
Name: "{autodesktop}\Gambit"; Filename: "{app}\gambit.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\gambit.exe"; Description: "{cm:LaunchProgram,Gambit}"; Flags: nowait postinstall skipifsilent
