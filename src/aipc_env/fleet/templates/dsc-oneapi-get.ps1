@{ Result = (Get-ChildItem (Join-Path ${env:ProgramFiles(x86)} 'Intel\oneAPI\compiler') -Name) -join ',' }
