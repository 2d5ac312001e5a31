"""Command line of the test lab, for building, debugging and measuring by hand.

python -m tests.testlab build              # build or check the cached layers, apt repository and
                                           # the controller environments of each Python (meanwhile)
python -m tests.testlab up -n 2            # start a lab, print how to reach it, wait for Ctrl-C
python -m tests.testlab status             # labs in the registry, their owners, leftovers
python -m tests.testlab clean              # tear down labs whose owner process is dead
python -m tests.testlab bench --hosts 2,4  # warm lab-up and ansible ping times, memory per host
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import signal
import sys
import tempfile
import time

from tests.testlab import aptrepo, controllers, image
from tests.testlab.lab import Lab, _entry_alive, _read_entries, cleanup_stale, lab_objects
from tests.testlab.util import LabError


def cmd_build(args) -> int:
    # the Ctrl-C test's controller environments (pip, mostly waiting on the index) are made meanwhile
    t_all = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(controllers.VERSIONS)) as pool:
        venvs = {v: pool.submit(controllers.python_for, v) for v in controllers.VERSIONS}
        for what, fn in (
            ("rootfs", image.ensure_rootfs),
            ("pylayer", image.ensure_pylayer),
            ("apt repository", aptrepo.ensure_repo),
        ):
            t0 = time.monotonic()
            result = fn()
            print(f"{what:15} {time.monotonic() - t0:6.1f}s  {result}")
        for version, fut in venvs.items():
            try:
                result = fut.result()
            except controllers.NoInterpreter as exc:  # a skip in the test, which says so
                result = f"none: {exc}"
            except LabError as exc:  # the test tries again and fails with it (an error in CI, not here)
                result = f"FAILED: {exc}"
            print(f"controller {version:4} {time.monotonic() - t_all:6.1f}s  {result}")
    return 0


def cmd_up(args) -> int:
    names = args.names.split(",") if args.names else [f"lab-{i:02d}" for i in range(1, args.n + 1)]
    lab = Lab(names)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    try:
        lab.up()
        print(lab.describe(), flush=True)
        print(f"up in {lab.timings['up_s']:.2f}s; Ctrl-C tears it down", flush=True)
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        lab.down()
    return 0


def cmd_status(args) -> int:
    for entry in _read_entries():
        state = "live" if _entry_alive(entry) else "owner dead (stale)"
        print(
            f"{entry['id']:5} {entry['subnet']:18} owner {entry['owner_pid']} {state}; "
            f"hosts {json.dumps(entry['hosts'])}; state {entry['state_dir']}"
        )
    print("objects of any lab:", json.dumps(lab_objects()))
    return 0


def cmd_clean(args) -> int:
    removed = cleanup_stale()
    print("removed:", " ".join(removed) or "nothing")
    return 0


def cmd_bench(args) -> int:
    import ansible_runner

    for n in [int(x) for x in args.hosts.split(",")]:
        lab = Lab([f"bench-{i:02d}" for i in range(1, n + 1)])
        try:
            lab.up()
            pings = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as pdd:
                    t0 = time.monotonic()
                    r = ansible_runner.run(
                        private_data_dir=pdd,
                        module="ping",
                        host_pattern="all",
                        inventory=str(lab.inventory),
                        envvars=lab.ansible_env(),
                        quiet=True,
                    )
                    pings.append(time.monotonic() - t0)
                    if r.status != "successful":
                        print(f"ansible ping failed on {n} hosts", file=sys.stderr)
                        return 1
            usage = [lab.usage(name) for name in lab.names]
            mib = 2**20
            print(
                f"{n} hosts: up {lab.timings['up_s']:.2f}s; ansible ping "
                + ", ".join(f"{p:.1f}s" for p in pings)
                + f"; per host: upper tmpfs {max(u['upper_bytes'] for u in usage) / mib:.1f} MiB, "
                f"/run+/dev/shm {max(u['run_bytes'] for u in usage) / mib:.1f} MiB, "
                f"PSS {max(u['pss_bytes'] for u in usage) / mib:.1f} MiB (max over hosts)"
            )
        finally:
            lab.down()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build or check the cached layers and the apt repository")
    p = sub.add_parser("up", help="start a lab and keep it up until Ctrl-C")
    p.add_argument("-n", type=int, default=2, help="number of hosts (lab-01..)")
    p.add_argument("--names", help="comma-separated host names instead of -n")
    sub.add_parser("status", help="list labs in the registry")
    sub.add_parser("clean", help="tear down labs whose owner process is dead")
    p = sub.add_parser("bench", help="measure lab-up and ansible ping times")
    p.add_argument("--hosts", default="2,4", help="comma-separated lab sizes")
    p.add_argument("--repeat", type=int, default=2, help="ansible pings per size")
    args = parser.parse_args(argv)
    return {"build": cmd_build, "up": cmd_up, "status": cmd_status, "clean": cmd_clean, "bench": cmd_bench}[args.cmd](
        args
    )


if __name__ == "__main__":
    sys.exit(main())
