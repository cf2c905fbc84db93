"""The launch-script templates (launch.bat, launch.sh), shipped inside the package as aipc_env.launchers."""
