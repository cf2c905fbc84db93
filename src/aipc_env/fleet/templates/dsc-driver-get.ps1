@{ Result = (Get-CimInstance Win32_VideoController | Where-Object { $_.PNPDeviceID -like '*VEN_8086*' }).DriverVersion }
