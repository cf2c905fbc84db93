"""Fleet admins' tools (environment side): the machine layer as a WinGet configuration (winget), an Ansible
playbook that applies it and the env to many hosts (ansible), offline bundles (bundle), and one report over many
doctor reports (report)."""
