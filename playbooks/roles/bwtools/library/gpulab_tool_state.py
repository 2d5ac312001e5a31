#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module of the bwtools role: the state of each tool on the host, in one call.

For each tool: the SHA256 of its fetched release tarball and its version marker as
module_utils/gpulab_tools.py reads it (with ``problem`` where a binary is gone or changed).
Read-only; supports check mode.
"""

DOCUMENTATION = r"""
---
module: gpulab_tool_state
short_description: Read the fetched tarball sums and version markers of the tools bwtools builds
description:
  - For each tool, the SHA256 of its tarball and its version marker (None where there is none).
options:
  tools:
    description: Tool name to the path of its fetched release tarball.
    type: dict
    required: true
  tools_dir:
    description: Folder of the version markers (V(<tool>.json)).
    type: path
    required: true
author: gpulab
"""

RETURN = r"""
tools:
  description: Tool name to {tarball_sha256, marker}.
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import gpulab_tools


def main():
    module = AnsibleModule(
        argument_spec=dict(tools=dict(type="dict", required=True), tools_dir=dict(type="path", required=True)),
        supports_check_mode=True,
    )
    out = {}
    for name, tarball in sorted(module.params["tools"].items()):
        marker = gpulab_tools.read_marker(os.path.join(module.params["tools_dir"], "%s.json" % name))
        out[name] = {"tarball_sha256": gpulab_tools.sha256_of(str(tarball)), "marker": marker}
    module.exit_json(changed=False, tools=out)


if __name__ == "__main__":
    main()
