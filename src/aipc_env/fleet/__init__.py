"""Fleet admins' tools (environment side): the machine layer as a WinGet configuration (winget), an Ansible
playbook that applies it and the env to many hosts (ansible), offline bundles (bundle), and one report over many
doctor reports (report)."""

from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")
"""The fleet's scripts, playbook and report page as template files (rendered by aipc_env.core.templating)."""


def template_text(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")
