#!/usr/bin/python3
# Stand-in for dcgmi {{ upstream }} of DCGM (gpulab test lab; not NVIDIA software).
# `dcgmi --version` prints the real line. `dcgmi diag -r N [-j]` answers like the real
# tool: without /etc/gpulab-testlab/dcgm-diag.json (or $GPULAB_FAKE_DCGM) it behaves as
# when no host engine runs (two error lines, exit 235, DCGM_ST_CONNECTION_NOT_VALID);
# with it, it prints the results of level N's tests in DCGM 4's JSON form (the "DCGM
# Diagnostic" document of dcgmi's --json) and exits as dcgmi does: 0, 226 when a test
# reported an error (DCGM_ST_NVVS_ERROR), 205 when one needs the GPU isolated
# (DCGM_ST_NVVS_ISOLATE_ERROR). The file, written by a test:
#   {"gpus": 2, "driver": "580.159.04",
#    "results": {"memory": {"1": {"status": "Fail", "error_id": 52, "error_category": 10,
#                                 "error_severity": 2, "warning": "..."},
#                        "software": {"host": {"status": "Fail", "error_id": 23, ...}}}}
# Every test of the level on every GPU passes unless "results" says otherwise. As the real dcgmi
# (dcgmi/Diag.cpp, tests/samples/dcgm/SOURCE.md): a warning prints "Fail" in the JSON, an error goes
# to the result of the entity it names, and only errors of no GPU ("host") go to test_summary.
import json
import os
import sys

VERSION = "{{ upstream }}"
SPEC = os.environ.get("GPULAB_FAKE_DCGM", "/etc/gpulab-testlab/dcgm-diag.json")
# (category, test) per level: level 1 the software checks; 2 adds pcie and memory;
# 3 adds the long hardware and stress tests; 4 adds memtest and pulse_test
LEVELS = [
    [("Deployment", "software")],
    [("Integration", "pcie"), ("Hardware", "memory")],
    [
        ("Hardware", "diagnostic"),
        ("Stress", "targeted_stress"),
        ("Stress", "targeted_power"),
        ("Stress", "memory_bandwidth"),
    ],
    [("Hardware", "memtest"), ("Hardware", "pulse_test")],
]
RANK = {"Pass": 0, "Skip": 0, "Warn": 1, "Fail": 2}


def usage(message):
    sys.stderr.write(
        "PARSE ERROR:\n             %s\n\nBrief USAGE:\n   dcgmi diag -r <suite-or-tests> [-j]\n" % message
    )
    return 255


def diag(args):
    level, as_json = None, False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-r", "--run") and i + 1 < len(args):
            level = args[i + 1]
            i += 1
        elif a in ("-j", "--json"):
            as_json = True
        i += 1
    names = {"quick": "1", "short": "1", "medium": "2", "long": "3", "xlong": "4"}
    level = names.get(level, level)
    if level not in ("1", "2", "3", "4"):
        return usage("Required argument missing: run" if level is None else "unknown suite or test: %s" % level)
    if not os.path.exists(SPEC):
        print("Error: unable to establish a connection to the specified host: localhost")
        print("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
        return 235
    with open(SPEC) as f:
        spec = json.load(f)
    gpus = range(int(spec.get("gpus", 1)))
    given = spec.get("results") or {}
    categories, codes = [], []
    for category, test in [t for lvl in LEVELS[: int(level)] for t in lvl]:
        results, worst, summary_warnings = [], "Pass", []
        host = given.get(test, {}).get("host")
        if host and "warning" in host:
            w = {
                "warning": host["warning"],
                "error_id": int(host.get("error_id", 0)),
                "error_category": int(host.get("error_category", 0)),
                "error_severity": int(host.get("error_severity", 0)),
            }
            summary_warnings.append(w)
            codes.append(w["error_severity"])
        for g in gpus:
            r = dict(given.get(test, {}).get(str(g)) or {"status": (host or {}).get("status", "Pass")})
            status = "Fail" if r.get("status") == "Warn" and as_json else r.get("status", "Pass")
            entry = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": g, "status": status}
            if "warning" in r:
                w = {
                    "warning": r["warning"],
                    "error_id": int(r.get("error_id", 0)),
                    "error_category": int(r.get("error_category", 0)),
                    "error_severity": int(r.get("error_severity", 0)),
                }
                entry["warnings"] = [w]
                codes.append(w["error_severity"])
            if "info" in r:
                entry["info"] = [r["info"]]
            results.append(entry)
            if RANK.get(entry["status"], 2) > RANK[worst]:
                worst = entry["status"]
        summary = {"status": "Fail" if worst == "Warn" and as_json else worst}
        if summary_warnings:
            summary["warnings"] = summary_warnings
        cat = next((c for c in categories if c["category"] == category), None)
        if cat is None:
            cat = {"category": category, "tests": []}
            categories.append(cat)
        cat["tests"].append({"name": test, "results": results, "test_summary": summary})
    doc = {
        "DCGM Diagnostic": {"test_categories": categories},
        "entity_groups": [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entities": [
                    {"entity_id": g, "device_id": spec.get("device_id", "1eb8"), "serial_num": "1320%09d" % g}
                    for g in gpus
                ],
            }
        ],
        "metadata": {"version": VERSION, "Driver Version Detected": spec.get("driver", "unknown")},
    }
    if as_json:
        print(json.dumps(doc, indent=3))
    else:
        for cat in categories:
            for t in cat["tests"]:
                print("| %-24s| %-46s|" % (t["name"], t["test_summary"]["status"]))
    if not codes:
        return 0
    return 205 if 2 in codes else 226


def main(argv):
    if argv[:1] in (["--version"], ["-v"]):
        print("\ndcgmi  version: %s\n" % VERSION)
        return 0
    if argv[:1] == ["diag"]:
        return diag(argv[1:])
    return usage("Unknown or missing subsystem")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
