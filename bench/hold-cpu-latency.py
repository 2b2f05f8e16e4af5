#!/usr/bin/env python3
"""hold-cpu-latency.py — run a command while holding a CPU wake-up latency
request (PM QoS, /dev/cpu_dma_latency): while the file stays open with a
value written, the kernel keeps every core out of idle states whose exit
takes longer than that many µs (0: the shallowest). For measuring what
deep idle states add to a wake-up; needs root.

Usage: hold-cpu-latency.py US CMD [ARG...]   (exit status: the command's)
"""

import os
import struct
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    us = int(sys.argv[1])
    try:
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
        os.write(fd, struct.pack("i", us))
    except OSError as e:
        sys.exit("hold-cpu-latency: /dev/cpu_dma_latency: %s" % e.strerror)
    print("hold-cpu-latency: holding %d us while the command runs" % us, flush=True)
    try:
        rc = subprocess.call(sys.argv[2:])
    finally:
        os.close(fd)
    sys.exit(rc)


if __name__ == "__main__":
    main()
