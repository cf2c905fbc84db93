$root = Join-Path ${env:ProgramFiles(x86)} 'Intel\oneAPI'; (Test-Path (Join-Path (Join-Path $root 'compiler') @AIPC_RELEASE@)) -and (Test-Path (Join-Path $root 'setvars.bat'))
