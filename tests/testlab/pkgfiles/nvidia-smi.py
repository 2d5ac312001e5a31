#!/usr/bin/python3
# Stand-in for nvidia-smi {{ upstream }} (gpulab test lab; not NVIDIA software).
# Without /etc/gpulab-testlab/fake-gpus.json it behaves like the real tool on a
# machine whose NVIDIA kernel driver is not loaded: the message below, exit 9.
# With the file (a JSON list of GPUs, possibly empty) it prints the real formats
# of the default table, -L, --version and --query-gpu=... --format=csv[,noheader][,nounits].
import json
import os
import sys
import time

DRIVER = "{{ upstream.split('-')[0] }}"
CUDA = "{{ cuda }}"
FAKE = os.environ.get("GPULAB_FAKE_GPUS", "/etc/gpulab-testlab/fake-gpus.json")
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
FIELDS = {
    "index": lambda i, g: (str(i), ""),
    "name": lambda i, g: (g["name"], ""),
    "gpu_name": lambda i, g: (g["name"], ""),
    "uuid": lambda i, g: (g.get("uuid", "GPU-%08x-0000-0000-0000-%012x" % (0x5EED0000 + i, i)), ""),
    "gpu_uuid": lambda i, g: FIELDS["uuid"](i, g),
    "serial": lambda i, g: (g.get("serial", "1320%09d" % i), ""),
    "driver_version": lambda i, g: (DRIVER, ""),
    "vbios_version": lambda i, g: (g.get("vbios", "90.04.38.00.03"), ""),
    "pci.bus_id": lambda i, g: ("00000000:" + g.get("bus_id", "%02X:00.0" % (0x3B + i)), ""),
    "memory.total": lambda i, g: (str(g.get("memory_mib", 15360)), " MiB"),
    "memory.used": lambda i, g: (str(g.get("memory_used_mib", 0)), " MiB"),
    "memory.free": lambda i, g: (str(g.get("memory_mib", 15360) - g.get("memory_used_mib", 0)), " MiB"),
    "power.limit": lambda i, g: ("%.2f" % g.get("power_limit_w", 70), " W"),
    "power.draw": lambda i, g: ("%.2f" % g.get("power_w", 9.0), " W"),
    "temperature.gpu": lambda i, g: (str(g.get("temp_c", 34)), ""),
    "utilization.gpu": lambda i, g: (str(g.get("util_pct", 0)), " %"),
    "clocks.sm": lambda i, g: (str(g.get("sm_clock_mhz", 300)), " MHz"),
    "clocks.max.sm": lambda i, g: (str(g.get("max_sm_clock_mhz", 1590)), " MHz"),
    "pcie.link.gen.current": lambda i, g: (str(g.get("pcie_gen", 3)), ""),
    "pcie.link.width.current": lambda i, g: (str(g.get("pcie_width", 16)), ""),
    "compute_cap": lambda i, g: (g.get("compute_cap", "7.5"), ""),
}


def table(gpus):
    out = [
        time.strftime("%a %b %e %H:%M:%S %Y") + "       ",
        "+" + "-" * 89 + "+",
        "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (DRIVER, DRIVER, CUDA),
        "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for i, g in enumerate(gpus):
        bus = FIELDS["pci.bus_id"](i, g)[0]
        mem = "%5dMiB / %6dMiB" % (g.get("memory_used_mib", 0), g.get("memory_mib", 15360))
        out += [
            "| %3d  %-24s       Off | %18s Off | %20s |" % (i, g["name"][:24], bus, "0"),
            "| N/A   %2dC    P8  %14s / %4dW | %22s | %6d%%      Default |"
            % (g.get("temp_c", 34), "%dW" % g.get("power_w", 9), g.get("power_limit_w", 70), mem, g.get("util_pct", 0)),
            "|                                         |                        |                  N/A |",
            "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        ]
    out += [
        " " * 91,
        "+" + "-" * 89 + "+",
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        "+" + "-" * 89 + "+",
    ]
    return "\n".join(out) + "\n"


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write("NVIDIA System Management Interface -- v%s\n\n(gpulab test lab stand-in)\n" % DRIVER)
        return 0
    try:
        with open(FAKE) as f:
            gpus = json.load(f)
    except FileNotFoundError:
        sys.stdout.write(NO_DRIVER)
        return 9
    if argv == ["--version"]:
        sys.stdout.write(
            "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
            "CUDA Version        : %s\n" % (DRIVER, DRIVER.rsplit(".", 1)[0], DRIVER, CUDA)
        )
        return 0
    if not gpus:
        sys.stdout.write("No devices were found\n")
        return 6
    if not argv:
        sys.stdout.write(table(gpus))
        return 0
    if argv == ["-L"]:
        for i, g in enumerate(gpus):
            sys.stdout.write("GPU %d: %s (UUID: %s)\n" % (i, g["name"], FIELDS["uuid"](i, g)[0]))
        return 0
    query = [a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")]
    fmt = [a.split("=", 1)[1] for a in argv if a.startswith("--format=")]
    if len(query) == 1 and len(fmt) == 1 and fmt[0].split(",")[0] == "csv":
        names = [n.strip() for n in query[0].split(",")]
        for n in names:
            if n not in FIELDS:
                sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % n)
                return 2
        opts = fmt[0].split(",")[1:]
        if "noheader" not in opts:
            units = {
                "memory.total": " [MiB]",
                "memory.used": " [MiB]",
                "memory.free": " [MiB]",
                "power.limit": " [W]",
                "power.draw": " [W]",
                "utilization.gpu": " [%]",
                "clocks.sm": " [MHz]",
                "clocks.max.sm": " [MHz]",
            }
            sys.stdout.write(", ".join(n + ("" if "nounits" in opts else units.get(n, "")) for n in names) + "\n")
        for i, g in enumerate(gpus):
            cells = []
            for n in names:
                value, unit = FIELDS[n](i, g)
                cells.append(value if "nounits" in opts else value + unit)
            sys.stdout.write(", ".join(cells) + "\n")
        return 0
    sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
