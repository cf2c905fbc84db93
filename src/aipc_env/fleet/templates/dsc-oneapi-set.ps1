throw ('install Intel oneAPI ' + @AIPC_RELEASE@ + ' through the fleet channel: winget-pkgs does not list it')
