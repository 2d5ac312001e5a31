"""The lab's hosts: any Ansible inventory, read through Ansible's own API.

``load(path)`` parses INI, YAML or plugin inventories exactly as
``ansible-playbook -i path`` would (group_vars/ and host_vars/ beside the file
included), and ``Inventory.select`` resolves the command-line selectors
``--host``, ``--device`` and ``--limit`` to ``Host`` records whose gpulab_*
variables were checked against lab/schemas/hostvars.schema.json. Any problem
is one ConfigError line naming the file, host or variable.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core import bounded
from lab.core import fields
from lab.core import limits
from lab.core import mlperf
from lab.core import paths
from lab.core import schema
from lab.core.errors import ConfigError, excerpt, shown
from lab.hosts import templating

# Make Ansible fail on an unparsable source instead of warning and going on
# with an empty inventory. Must be set before ansible.constants is imported.
os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_FAILED", "True")
os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "True")
# A key given twice in a YAML inventory is an error, not the last one silently winning (Ansible's default warns).
os.environ.setdefault("ANSIBLE_DUPLICATE_YAML_DICT_KEY", "error")

DEFAULT_WORKDIR = "/var/lib/gpulab"
# addresses reserved for documentation (RFC 5737, RFC 3849): the example lab (inventory/hosts.yml) uses them,
# and gpulab never opens a connection to one
DOCUMENTATION_NETS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# What ssh, Ansible and Fabric are given as the host to reach and the user to log in as: a DNS name or an IP
# address, a login name; never a word ssh would read as an option (a leading '-'), never a space or a newline
DNS_NAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})$")
LOGIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}[$]?$")
# Ansible's connection variables gpulab reads itself, templated as Ansible templates them
CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_port", "ansible_ssh_port")


@dataclass(frozen=True)
class Host:
    """One inventory host as gpulab uses it."""

    name: str
    address: str
    port: int
    user: str | None
    connection: str  # "ssh" or "local"
    gpu_model: str  # or "auto"
    gpu_count: int | str  # or "auto"
    stack: str
    groups: tuple[str, ...]
    workdir: str
    python: str | None
    ssh_key: str | None
    known_hosts: str
    pcie: dict | None = None
    vars: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


def _one_line_parse_error(path: Path, captured: str) -> str:
    """Condense Ansible's multi-plugin parse warnings into the YAML/INI reason."""
    text = " ".join(captured.split())
    m = re.search(
        r"Syntax Error while loading YAML\.\s+(.*?)\s+The error appears to be in '[^']*': "
        r"line (\d+), column (\d+)",
        text,
    )
    if m:
        twice = re.search(r"found a duplicate dict key \((.*?)\)", m.group(1))
        if twice:  # ANSIBLE_DUPLICATE_YAML_DICT_KEY=error, whose message still says 'Using last defined value'
            return (
                f"{path}: line {m.group(2)}, column {m.group(3)}: the mapping there gives key "
                f"{excerpt(repr(twice.group(1)), 60)} twice"
            )
        return f"{path}: line {m.group(2)}, column {m.group(3)}: malformed YAML ({m.group(1)})"
    m = re.search(r"with (?:yaml|ini) plugin: (.*?)(?: \[WARNING\]|$)", text)
    reason = m.group(1) if m else "no inventory plugin could parse it"
    return f"{path}: not a valid inventory ({reason})"


def _address(value, what: str) -> str:
    """``ansible_host`` as a DNS name or an IP address (IPv6 with a zone index too), else ConfigError."""
    if isinstance(value, str) and DNS_NAME.fullmatch(value):
        return value
    if isinstance(value, str):
        ip, _, zone = value.partition("%")
        with contextlib.suppress(ValueError):
            if ":" in ip and ipaddress.ip_address(ip) and (not zone or re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", zone)):
                return value
    raise ConfigError(f"{what}: {shown(value)} is not a host name or an IP address")


def _login(value, what: str) -> str | None:
    """``ansible_user`` as a login name (or unset), else ConfigError."""
    if value is None or (isinstance(value, str) and LOGIN_NAME.fullmatch(value)):
        return value
    raise ConfigError(f"{what}: {shown(value)} is not a user name (letters, digits, . _ -)")


def _port(value, what: str) -> int:
    """``ansible_port`` as a whole number from 1 to 65535 (an INI inventory gives it as text), else ConfigError."""
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 5:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ConfigError(f"{what} {shown(value, 40)} is not a port (1 to 65535)")
    return value


def _ssh_option(args: str, option: str) -> str | None:
    """Value of ``-o Option=value`` in an ssh argument string (ValueError for one shlex cannot split)."""
    words = shlex.split(args or "")
    for i, word in enumerate(words):
        candidate = (
            word[2:]
            if word.startswith("-o") and len(word) > 2
            else (words[i + 1] if word == "-o" and i + 1 < len(words) else None)
        )
        if candidate and "=" in candidate:
            key, value = candidate.split("=", 1)
            if key.strip().lower() == option.lower():
                return value.strip()
    return None


class Inventory:
    """An Ansible inventory file (or directory) as gpulab sees it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if not self.path.exists():
            raise ConfigError(f"{self.path}: inventory not found")
        if not self.path.is_dir():  # Ansible would block on a FIFO and read /dev/zero forever
            try:  # a text file (INI, YAML, plugin config), or an inventory script Ansible runs
                data = bounded.read_bytes(self.path, limit=limits.DATA_BYTES)
                if not os.access(self.path, os.X_OK):
                    data.decode("utf-8")
            except bounded.Unreadable as exc:
                raise ConfigError(f"{self.path}: not an inventory: {exc.reason}") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{self.path}: not an inventory: not UTF-8 text (byte {exc.start})") from None
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager

        self._loader = DataLoader()
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
                self._inv = InventoryManager(loader=self._loader, sources=[str(self.path)])
        except AnsibleError:
            raise ConfigError(_one_line_parse_error(self.path, captured.getvalue())) from None
        self._vm = VariableManager(loader=self._loader, inventory=self._inv)
        self.names = [h.name for h in self._inv.get_hosts("all")]
        if not self.names:
            raise ConfigError(f"{self.path}: inventory defines no hosts")

    @property
    def groups(self) -> list[str]:
        return sorted(g for g in self._inv.groups if g not in ("all", "ungrouped"))

    def raw_vars(self, name: str) -> dict[str, Any]:
        """All variables of one host as Ansible resolves them (group_vars included)."""
        host = self._inv.get_host(name)
        if host is None:
            raise ConfigError(f"{self.path}: unknown host {excerpt(repr(name), 60)}")
        data = self._vm.get_vars(host=host, include_hostvars=False)
        from ansible.template import Templar

        templar = Templar(loader=self._loader, variables=data)
        templated = {
            key: value
            for key, value in data.items()
            if (key.startswith("gpulab_") or key in CONNECTION_VARS) and isinstance(value, str) and "{{" in value
        }
        try:  # in a child process, bounded: a template is a program (lab.hosts.templating)
            rendered = templating.render(templar.template, templated)
        except templating.Refused as exc:
            keys = ", ".join(templated)
            raise ConfigError(
                f"{self.path}: host {name}: {excerpt(keys, 80)}: cannot template ({exc.reason})"
            ) from None
        out = dict(data)
        for key, (how, value) in rendered.items():
            if how != "ok":  # undefined variable and the like
                raise ConfigError(
                    f"{self.path}: host {name}: {key}: cannot template {excerpt(repr(templated[key]))} "
                    f"({excerpt(value)})"
                )
            out[key] = value
        return out

    def host(self, name: str, *, known_hosts: str | None = None) -> Host:
        """One host, its name, its connection variables and its gpulab variables checked."""
        fields.host_name(name, f"{self.path}: host")  # it names results/<sweep>/<host>/ and a line of output
        where = f"{self.path}: host {name}"
        v = self.raw_vars(name)
        own = {k: val for k, val in v.items() if k.startswith("gpulab_")}
        schema.conform(own, "hostvars", f"{self.path}: host {name}")
        if "gpulab_workdir" in own:  # the host's runs and data land there: never /, /etc, /usr, ...
            paths.output_root(own["gpulab_workdir"], f"{self.path}: host {name}: gpulab_workdir", local=False)
        model = own["gpulab_gpu_model"]
        if model != "auto" and mlperf.default_rules().device(model) not in mlperf.default_rules().device_power:
            raise ConfigError(
                f"{where}: gpulab_gpu_model {excerpt(repr(model), 60)} is not 'auto' nor a GPU model of "
                f"lab/data/devices.yml (a name or an alias there: T4, V100-PCIE-16GB, H200, ...)"
            )
        connection = v.get("ansible_connection", "ssh")
        if not isinstance(connection, str) or connection not in ("ssh", "local", "paramiko", "smart"):
            raise ConfigError(
                f"{where}: ansible_connection {shown(connection)} is not supported "
                f"(gpulab drives hosts over SSH or locally)"
            )
        address = _address(v.get("ansible_host", name), f"{where}: ansible_host")
        user = _login(v.get("ansible_user"), f"{where}: ansible_user")
        ssh_keys = ("ansible_ssh_private_key_file", "ansible_private_key_file")
        for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args", *ssh_keys):
            if v.get(key) is not None and not isinstance(v[key], str):  # never turned into text: an alias bomb
                raise ConfigError(f"{where}: {key} {shown(v[key])} is not text")
        ssh_args = " ".join(v.get(k) or "" for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args"))
        try:
            kh = _ssh_option(ssh_args, "UserKnownHostsFile") or known_hosts or DEFAULT_KNOWN_HOSTS
        except ValueError as exc:  # an unclosed quote
            raise ConfigError(
                f"{where}: ansible_ssh_common_args/ansible_ssh_extra_args {excerpt(repr(ssh_args), 60)}: {exc}"
            ) from None
        port_key = "ansible_port" if "ansible_port" in v or "ansible_ssh_port" not in v else "ansible_ssh_port"
        port = _port(v.get(port_key, 22), f"{where}: {port_key}")
        groups = tuple(
            sorted(g.name for g in self._inv.get_host(name).get_groups() if g.name not in ("all", "ungrouped"))
        )
        return Host(
            name=name,
            address=address,
            port=port,
            user=user,
            connection="local" if connection == "local" else "ssh",
            gpu_model=own["gpulab_gpu_model"],
            gpu_count=own["gpulab_gpu_count"],
            stack=own["gpulab_stack"],
            groups=groups,
            workdir=own.get("gpulab_workdir", DEFAULT_WORKDIR),
            python=own.get("gpulab_python"),
            ssh_key=v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file"),
            known_hosts=os.path.expanduser(kh),
            pcie=own.get("gpulab_pcie"),
            vars=own,
        )

    def _matching(self, limit: str) -> set[str]:
        """Hosts of an Ansible pattern; ConfigError for an invalid pattern or a part of it that matches nothing."""
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import split_host_pattern

        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                parts = split_host_pattern(limit)
                if not parts:
                    raise ConfigError(f"{self.path}: --limit {excerpt(repr(limit), 60)} is an empty host pattern")
                for part in parts:  # each term one name or pattern, at most one & or ! before it, matching something
                    term = part.lstrip("&!")
                    if not term or len(part) - len(term) > 1:
                        raise ConfigError(
                            f"{self.path}: --limit {excerpt(repr(limit), 60)} is not a valid host "
                            f"pattern ({excerpt(repr(part), 40)}: one name or pattern after at most "
                            f"one & or !)"
                        )
                    if (len(parts) > 1 or term != part) and not self._inv.list_hosts(term):
                        raise ConfigError(
                            f"{self.path}: --limit {excerpt(repr(limit), 60)}: {excerpt(repr(term), 40)} "
                            "matches no host or group"
                        )
                return {h.name for h in self._inv.list_hosts(limit)}
        except AnsibleError as exc:
            reason = " ".join(str(exc).split())
            raise ConfigError(
                f"{self.path}: --limit {excerpt(repr(limit), 60)} is not a valid host pattern ({excerpt(reason, 200)})"
            ) from None
        except re.error as exc:
            raise ConfigError(f"{self.path}: --limit '{limit}' is not a valid host pattern ({exc})") from None

    def select(
        self,
        hosts: str | list[str] | None = None,
        device: str | None = None,
        limit: str | None = None,
        *,
        known_hosts: str | None = None,
    ) -> list[Host]:
        """Resolve selectors to hosts (intersection of those given; all hosts if none).

        hosts: NAME[,NAME...]; device: a group name (t4, v100...); limit: an
        Ansible host pattern. Unknown names, groups or empty patterns raise.
        """
        chosen = list(self.names)
        if hosts is not None:  # --host '' or 'a,,b' is a typo, never "every host" nor 'a,b'
            wanted = [str(h) for h in limits.items(hosts, "--host")]
            for name in wanted:
                if name not in self.names:
                    raise ConfigError(
                        f"{self.path}: unknown host {excerpt(repr(name), 60)} (hosts: {excerpt(', '.join(self.names))})"
                    )
            chosen = [n for n in chosen if n in wanted]
        if device is not None:  # --device '' names no group: refused, never "every host"
            if device not in self._inv.groups:
                raise ConfigError(
                    f"{self.path}: unknown device group {excerpt(repr(device), 60)} "
                    f"(groups: {excerpt(', '.join(self.groups))})"
                )
            members = {h.name for h in self._inv.groups[device].get_hosts()}
            chosen = [n for n in chosen if n in members]
        if limit is not None:  # --limit '' is a pattern too: an empty one, refused
            matched = self._matching(limit)
            if not matched:
                raise ConfigError(f"{self.path}: pattern {excerpt(repr(limit), 60)} matches no host")
            chosen = [n for n in chosen if n in matched]
        if not chosen:
            given = ", ".join(
                f"{k} {excerpt(v, 60)}" for k, v in (("--host", hosts), ("--device", device), ("--limit", limit)) if v
            )
            raise ConfigError(f"{self.path}: no host matches {given}")
        return [self.host(n, known_hosts=known_hosts) for n in chosen]


def documentation_address(address: str) -> bool:
    """True for an address of the documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
    2001:db8::/32), written as an IP address (IPv4-mapped IPv6 and a zone index included)."""
    try:
        ip = ipaddress.ip_address(str(address).strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in DOCUMENTATION_NETS)


def refuse_examples(hosts, inventory: Path | str | None = None) -> None:
    """ConfigError (one line) when any host to be contacted has a documentation address: that is the example
    inventory (inventory/hosts.yml), not a lab; nothing is contacted. Local hosts are never refused."""
    bad = [h for h in hosts if not h.is_local and documentation_address(h.address)]
    if not bad:
        return
    where = f"{inventory}: " if inventory else ""
    shown = ", ".join(f"{h.name} ({h.address})" for h in bad[:4]) + (
        f" and {len(bad) - 4} more" if len(bad) > 4 else ""
    )
    raise ConfigError(
        f"{where}{shown}: documentation address(es) (RFC 5737/3849): this is the example inventory, "
        f"not a lab, and gpulab does not connect to it; name your lab's inventory with "
        f"--inventory FILE (or the setting gpulab.inventory, e.g. INVOKE_GPULAB_INVENTORY=FILE)"
    )


def load(path: Path | str) -> Inventory:
    return Inventory(path)
