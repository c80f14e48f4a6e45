"""Documentation fragments shared by the collection's modules."""

from __future__ import annotations


class ModuleDocFragment:
    """``extends_documentation_fragment: [glm5.deploy.attributes.read_only]`` for a module that only reads."""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    description: Read-only; it does the same in check mode.
    support: full
  diff_mode:
    description: It changes nothing, so there is no diff.
    support: none
"""
