#!/usr/bin/env python3
"""How long a rank waits for rank 0's TCPStore after it starts listening,
with torch's own client connect and with corral.train.torch's probe first
(bench/train/run.sh prints it; issue 18 "Training start and restart").

torch's client sleeps a whole second after a refused connect (c10d
socket.cpp), so a rank that starts before rank 0 listens waits up to 1 s
more than it must, at every start and every gang restart; corral's
init_process_group probes the address every few ms first. Each round
starts a client, then rank 0's store DELAY later (spread over 0.1-0.9 s,
the same delays for both ways), and measures from the moment rank 0
began listening to the client's store being connected. Prints `figure`
lines: the median and the worst over ROUNDS (argv[1], default 5)."""
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torch.distributed import TCPStore  # noqa: E402
import corral.train.torch as ct  # noqa: E402

MASTER = (
    "import sys, time, datetime\n"
    "from torch.distributed import TCPStore\n"
    "port, at = int(sys.argv[1]), float(sys.argv[2])\n"
    "time.sleep(max(0.0, at - time.time()))\n"
    "t = time.time()\n"
    "s = TCPStore('127.0.0.1', port, 2, True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)\n"
    "print(t, flush=True)\n"
    "s.wait(['done'])\n"
)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def one(delay, probe):
    port = free_port()
    # the master process imports torch first; it listens at a set time
    at = time.time() + 3.0 + delay
    m = subprocess.Popen([sys.executable, "-c", MASTER, str(port), str(at)], stdout=subprocess.PIPE, text=True)
    time.sleep(max(0.0, at - delay - time.time()))  # the client starts DELAY before the listen
    if probe:
        ct._await_listener("127.0.0.1", port, time.monotonic() + 60)
    c = TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=60))
    done = time.time()
    c.set("done", "1")
    listened = float(m.stdout.readline())
    m.wait()
    return (done - listened) * 1000.0


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    delays = [0.1 + 0.8 * i / max(1, rounds - 1) for i in range(rounds)]
    res = {}
    for name, probe in (("torch", False), ("corral", True)):
        res[name] = [one(d, probe) for d in delays]
        print("figure train_store_connect_%s_median %.1f ms" % (name, statistics.median(res[name])))
        print("figure train_store_connect_%s_max %.1f ms" % (name, max(res[name])))
    m_t, m_c = statistics.median(res["torch"]), statistics.median(res["corral"])
    if m_c > 0:
        print("ratio train_store_connect_torch_vs_corral %.1f" % (m_t / m_c))


if __name__ == "__main__":
    main()
