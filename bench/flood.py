#!/usr/bin/python3
"""A stranger's floods against one Syncline node, and what they cost it (docs/SECURITY.md).

  flood.py idle ADDRESS N SECONDS PID
      opens N TCP connections to ADDRESS (tcp://HOST:PORT or HOST:PORT) that never speak,
      holds them for SECONDS, and prints PID's open descriptors and resident memory before,
      at their peak, and after; and how many of the N the node has reset or closed.
  flood.py hello ADDRESS SECONDS PID
      for SECONDS, opens connections that send ZMTP's greeting for CURVE and a HELLO whose
      box does not open (a stranger without the job's key), at once, without waiting for the
      node's greeting; prints the rate reached and the CPU seconds PID spent.
  flood.py hello-after-greeting ADDRESS SECONDS PID
      the same, with each HELLO sent once the node's greeting came, as a ZeroMQ client does.
  flood.py quiet ADDRESS SECONDS PID
      no flood: the CPU seconds PID spends in SECONDS of its own work, to compare with.

The numbers are the node's own (/proc/PID), so the flood may run on the node's machine.
"""
import os
import select
import socket
import sys
import time


def parse(address):
    address = address.removeprefix("tcp://")
    host, port = address.rsplit(":", 1)
    return host, int(port)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ended(sock):
    """Whether the node reset or closed the connection (its greeting is read and dropped)."""
    try:
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(4096):
                return True
    except OSError:
        return True
    return False


def idle(address, n, seconds, pid):
    before = (fds(pid), rss_mib(pid))
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(parse(address))
            socks.append(s)
        except OSError:
            s.close()
    peak_fds, peak_rss = before
    end = time.time() + seconds
    while time.time() < end:
        peak_fds = max(peak_fds, fds(pid))
        peak_rss = max(peak_rss, rss_mib(pid))
        time.sleep(0.1)
    cut = sum(1 for s in socks if ended(s))
    for s in socks:
        s.close()
    time.sleep(1)
    after = (fds(pid), rss_mib(pid))
    print(f"idle flood of {n} ({len(socks)} connected): descriptors {before[0]} -> peak "
          f"{peak_fds} -> {after[0]} after; RSS {before[1]:.1f} -> peak {peak_rss:.1f} -> "
          f"{after[1]:.1f} MiB; {cut} of them reset or closed by the node while held")


GREETING = (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") +
            b"\x00" + b"\x00" * 31)
# A HELLO command (flags 0x04, size 200): name, version 1.0, 72 bytes of padding, a client
# transient key, a nonce and an 80-byte box that opens under no key.
HELLO = (b"\x04\xc8" + b"\x05HELLO" + b"\x01\x00" + b"\x00" * 72 + os.urandom(32) +
         os.urandom(8) + os.urandom(80))


def hello(address, seconds, pid, wait):
    cpu0 = cpu_seconds(pid)
    sent = 0
    start = time.time()
    linger = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # close with a reset: no TIME_WAIT pile-up
    while time.time() - start < seconds:
        # A hundred connections at a time, each sent its greeting and HELLO once it is up.
        batch = []
        for _ in range(100):
            s = socket.socket()
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            s.connect_ex(parse(address))
            batch.append(s)
        _, writable, _ = select.select([], batch, [], 1.0)
        for s in writable:
            try:
                s.send(GREETING if wait else GREETING + HELLO)
                sent += 0 if wait else 1
            except OSError:
                pass
        if wait:  # as a ZeroMQ client does: the HELLO after the node's greeting
            readable, _, _ = select.select(writable, [], [], 1.0)
            for s in readable:
                try:
                    if s.recv(64):
                        s.send(HELLO)
                        sent += 1
                except OSError:
                    pass
        time.sleep(0.005)  # the node reads them before they are reset
        for s in batch:
            s.close()
    elapsed = time.time() - start
    time.sleep(0.5)
    cpu = cpu_seconds(pid) - cpu0
    print(f"HELLO flood: {sent} in {elapsed:.1f} s ({sent / elapsed:.0f}/s); the node spent "
          f"{cpu:.2f} s of CPU ({1e6 * cpu / max(sent, 1):.0f} us per HELLO)")


def quiet(seconds, pid):
    cpu0 = cpu_seconds(pid)
    time.sleep(seconds)
    print(f"no flood: the node spent {cpu_seconds(pid) - cpu0:.2f} s of CPU in {seconds:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "idle":
        idle(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "quiet":
        quiet(float(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) in (5, 6) and sys.argv[1] in ("hello", "hello-after-greeting"):
        hello(sys.argv[2], float(sys.argv[3]), int(sys.argv[-1]), sys.argv[1] != "hello")
    else:
        sys.exit(__doc__)
