# Apache-2.0
"""The attributes of the collection's modules, one definition each (modules name one with
``extends_documentation_fragment: [llamafleet.fleet.attributes.<name>]``)."""

from __future__ import annotations


class ModuleDocFragment:
    _CHECK = r"""
  check_mode:
    description: Can run in check mode and return a changed status prediction without modifying
      the target.
    support: {check}
"""
    _DIFF = r"""
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) with --diff.
    support: {diff}
"""

    #: check mode and diff mode
    CHECK_DIFF = "attributes:" + _CHECK.format(check="full") + _DIFF.format(diff="full")

    #: check mode (it changes nothing, or predicts the change); no diff
    CHECK = "attributes:" + _CHECK.format(check="full") + _DIFF.format(diff="none")

    #: neither (the role runs it only where a change is wanted, never in check mode)
    NONE = "attributes:" + _CHECK.format(check="none") + _DIFF.format(diff="none")
