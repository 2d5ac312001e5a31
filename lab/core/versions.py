"""The version rule: does a version found on a host satisfy the version a profile names?

One rule for every reader of versions: ``invoke audit`` (the stack facts module
on the host, which imports this very file as Ansible module_utils through
``playbooks/module_utils/gpulab_versions.py``) and ``invoke validate`` (on the
controller). The rule:

* ``580.*`` (a branch) is satisfied by every version whose leading components
  are ``580``;
* otherwise both versions are cut to their release part (an epoch ``1:``, a
  local label ``+cu130``, a package revision ``-1`` or ``~22.04`` are
  dropped) and compared component by component over the shorter of the two,
  which must have at least two components: ``2.7.1+cu128`` satisfies
  ``2.7.1``, ``9.19.0`` (a header) satisfies ``9.19.0.56``, ``13.0`` (what
  PyTorch reports) satisfies ``13.0.2``; ``2.7.10`` does not satisfy ``2.7.1``
  and ``12`` satisfies nothing but ``12``.

This file runs on managed hosts too (Python 3.6 and later): standard library
only, no annotations that need ``from __future__``.
"""

import re

_CUT = re.compile(r"[+\-~ ]")


def release(version):
    """The release components of a version: '1:2.7.1+cu128' -> ['2', '7', '1']."""
    text = str(version).strip()
    if re.match(r"^[0-9]+:", text):
        text = text.split(":", 1)[1]
    text = _CUT.split(text, 1)[0]
    return [part for part in text.split(".") if part != ""] if text else []


def agrees(found, expected):
    """True when ``found`` (read from a host) satisfies ``expected`` (a profile's version)."""
    if found is None or str(found).strip() == "":
        return False
    wanted = str(expected).strip()
    have = release(found)
    if wanted.endswith(".*"):
        branch = release(wanted[:-2])
        return bool(branch) and have[: len(branch)] == branch
    want = release(wanted)
    n = min(len(have), len(want))
    if n == 0:
        return False
    if n < 2 and len(have) != len(want):
        return False
    return have[:n] == want[:n]
