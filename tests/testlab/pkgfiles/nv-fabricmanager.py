#!/usr/bin/python3
# Stand-in for nv-fabricmanager {{ upstream }} (gpulab test lab; not NVIDIA software).
# `--version` prints the real line. Started with a configuration file (as its service
# starts it: `nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg`) it
# daemonizes like the real one and stays running (its process name, nv-fabricmanage,
# is what a host without systemd shows); it manages nothing.
import os
import sys
import time

VERSION = "{{ upstream.split('-')[0] }}"


def main(argv):
    if argv[:1] in (["--version"], ["-v"]):
        print("Fabric Manager version is : %s" % VERSION)
        return 0
    if argv[:1] != ["-c"] or len(argv) < 2 or not os.path.isfile(argv[1]):
        sys.stderr.write("usage: nv-fabricmanager -c <config file> | --version\n")
        return 1
    if os.fork():
        return 0
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
