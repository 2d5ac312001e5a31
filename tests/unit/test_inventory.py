"""lab.hosts.inventory: Ansible inventories in, validated Host records out."""

import textwrap
from pathlib import Path

import pytest

from lab.hosts import inventory
from lab.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def test_example_lab_groups_by_device():
    inv = inventory.load(ROOT / "inventory/hosts.yml")
    t4 = inv.select(device="t4")
    v100 = inv.select(device="v100")
    assert [h.name for h in t4] == ["r740-01", "r740-02"]
    assert {h.gpu_model for h in t4} == {"T4"} and {h.gpu_count for h in t4} == {4}
    assert {h.gpu_model for h in v100} == {"V100-PCIE-16GB"} and {h.gpu_count for h in v100} == {3}
    assert all(h.stack == "mlperf-v0.5" and h.pcie == {"gen": 3, "width": 16} for h in t4 + v100)
    # group_vars/all.yml beside the inventory applies
    assert {h.workdir for h in t4} == {"/var/lib/gpulab"}


def test_selectors_intersect_and_accept_ansible_patterns():
    inv = inventory.load(ROOT / "inventory/hosts.yml")
    assert [h.name for h in inv.select(hosts="r740-03,r740-01")] == ["r740-01", "r740-03"]
    assert [h.name for h in inv.select(limit="r740:!t4")] == ["r740-03", "r740-04"]
    assert [h.name for h in inv.select(device="v100", limit="~r740-0[34]", hosts="r740-04")] == ["r740-04"]


def test_local_inventory_is_this_machine():
    (host,) = inventory.load(ROOT / "inventory/local.yml").select()
    assert host.is_local and host.gpu_count == "auto" and host.workdir.startswith("~/")


def test_ini_inventory_with_host_vars(tmp_path):
    p = write(
        tmp_path,
        "lab.ini",
        """\
        [t4]
        node1 ansible_host=10.0.0.1 ansible_port=2222 gpulab_gpu_model=T4 gpulab_gpu_count=2 gpulab_stack=current
        """,
    )
    (h,) = inventory.load(p).select(device="t4")
    assert (h.address, h.port, h.gpu_count, h.groups) == ("10.0.0.1", 2222, 2, ("t4",))


def test_known_hosts_comes_from_ssh_args(tmp_path):
    p = write(
        tmp_path,
        "i.yml",
        """\
        all:
          hosts:
            a:
              gpulab_gpu_model: T4
              gpulab_gpu_count: 1
              gpulab_stack: current
              ansible_ssh_common_args: "-o UserKnownHostsFile=/tmp/kh -o StrictHostKeyChecking=yes"
        """,
    )
    assert inventory.load(p).host("a").known_hosts == "/tmp/kh"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(hosts="r740-99"), "inventory/hosts.yml: unknown host 'r740-99'"),
        (dict(device="a100"), "inventory/hosts.yml: unknown device group 'a100'"),
        (dict(limit="gpu-*"), "inventory/hosts.yml: pattern 'gpu-*' matches no host"),
        (dict(hosts="r740-01", device="v100"), "inventory/hosts.yml: no host matches --host r740-01, --device v100"),
    ],
)
def test_unknown_selectors_are_one_line_errors(kwargs, message):
    inv = inventory.load(ROOT / "inventory/hosts.yml")
    with pytest.raises(ConfigError) as err:
        inv.select(**kwargs)
    text = str(err.value)
    assert text.startswith(str(ROOT / "inventory/hosts.yml") + ":") and "\n" not in text
    assert message.split("inventory/hosts.yml", 1)[1] in text
    assert err.value.exit_code == 2


BAD_VARS = [
    ("gpulab_gpu_count: four", "host a: gpulab_gpu_count: 'four' is not valid here"),
    ("gpulab_gpu_count: -1", "host a: gpulab_gpu_count: 'four'"),
    ("gpulab_stack: 'Bad Name'", "host a: gpulab_stack: 'Bad Name' does not match"),
    ("gpulab_gpu_cuont: 2", "host a: unknown key(s) gpulab_gpu_cuont"),
    ("gpulab_pcie: {gen: 3}", "host a: gpulab_pcie: width is missing"),
    ("gpulab_workdir: relative/path", "host a: gpulab_workdir: 'relative/path' does not match"),
]


@pytest.mark.parametrize("line, message", BAD_VARS)
def test_ill_typed_or_unknown_variables_name_host_and_variable(tmp_path, line, message):
    base = {"gpulab_gpu_model": "T4", "gpulab_gpu_count": 1, "gpulab_stack": "current"}
    key = line.split(":")[0]
    rows = [f"{k}: {v}" for k, v in base.items() if k != key] + [line]
    p = write(tmp_path, "i.yml", "all:\n  hosts:\n    a:\n" + "".join(f"      {r}\n" for r in rows))
    with pytest.raises(ConfigError) as err:
        inventory.load(p).select()
    text = str(err.value)
    assert text.startswith(f"{p}: host a: ")
    if "-1" in line:
        assert "gpulab_gpu_count" in text
    else:
        assert message in text


def test_missing_variable(tmp_path):
    p = write(tmp_path, "i.yml", "all:\n  hosts:\n    a:\n      gpulab_gpu_model: T4\n      gpulab_stack: current\n")
    with pytest.raises(ConfigError, match=r"host a: gpulab_gpu_count is missing"):
        inventory.load(p).select()


def test_malformed_and_missing_files(tmp_path):
    bad = write(tmp_path, "bad.yml", "all:\n  hosts:\n    a: {x: 1\n")
    with pytest.raises(ConfigError, match=r"bad.yml: line \d+, column \d+: malformed YAML"):
        inventory.load(bad)
    with pytest.raises(ConfigError, match=r"nope.yml: inventory not found"):
        inventory.load(tmp_path / "nope.yml")
    empty = write(tmp_path, "empty.yml", "all:\n  children: {}\n")
    with pytest.raises(ConfigError, match="defines no hosts"):
        inventory.load(empty)


def test_only_selected_hosts_are_checked(tmp_path):
    p = write(
        tmp_path,
        "i.yml",
        """\
        all:
          children:
            good:
              hosts:
                a: {gpulab_gpu_model: T4, gpulab_gpu_count: 1, gpulab_stack: current}
            broken:
              hosts:
                b: {gpulab_gpu_model: T4}
        """,
    )
    inv = inventory.load(p)
    assert [h.name for h in inv.select(device="good")] == ["a"]
    with pytest.raises(ConfigError, match="host b: gpulab_gpu_count is missing"):
        inv.select(device="broken")


@pytest.mark.parametrize(
    "given, address",
    [
        ("10.0.0.1", "10.0.0.1"),
        ("node-1.lab.example", "node-1.lab.example"),
        ("'::1'", "::1"),
        ("'fe80::1%eth0'", "fe80::1%eth0"),
        ('"{{ inventory_hostname }}.lab.example"', "n1.lab.example"),  # templated, as Ansible connects to it
    ],
)
def test_ansible_host_takes_names_addresses_and_templates(tmp_path, given, address):
    p = write(
        tmp_path,
        "i.yml",
        f"""\
        all:
          hosts:
            n1:
              ansible_host: {given}
              ansible_user: gpu.admin
              ansible_port: "2222"
              gpulab_gpu_model: V100
              gpulab_gpu_count: 1
              gpulab_stack: current
        """,
    )
    (h,) = inventory.load(p).select()
    assert (h.address, h.user, h.port) == (address, "gpu.admin", 2222)
