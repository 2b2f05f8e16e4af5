#!/usr/bin/env python3
"""notify_log.py SOCKET_PATH SECONDS -- CMD...: run CMD with NOTIFY_SOCKET
set to a datagram socket made here and print every sd_notify message it
sends, with the seconds since CMD started, until READY=1 (then SIGTERM,
and the messages until it exits) or SECONDS pass. Prints CMD's exit code.
With --term-at TEXT: SIGTERM as soon as a message holds TEXT instead."""
import os, signal, socket, subprocess, sys, time

args = sys.argv[1:]
term_at = None
if args[0] == "--term-at":
    term_at, args = args[1], args[2:]
path, secs, cmd = args[0], float(args[1]), args[3:]
if os.path.exists(path):
    os.unlink(path)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(0.05)
env = dict(os.environ, NOTIFY_SOCKET=path)
t0 = time.monotonic()
p = subprocess.Popen(cmd, env=env)
sent = False
while time.monotonic() - t0 < secs:
    try:
        msg = s.recv(4096).decode(errors="replace")
    except socket.timeout:
        if p.poll() is not None:
            break
        continue
    print("%8.3f s  %s" % (time.monotonic() - t0, msg.replace("\n", " | ")), flush=True)
    if not sent and ((term_at and term_at in msg) or (not term_at and "READY=1" in msg)):
        p.send_signal(signal.SIGTERM)
        sent = True
        print("%8.3f s  (SIGTERM sent)" % (time.monotonic() - t0), flush=True)
try:
    rc = p.wait(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    rc = p.wait()
print("exit code %d after %.3f s" % (rc, time.monotonic() - t0))
