#!/usr/bin/env python3
"""Write the hardware specs of the 18 compute trays of one GB200 NVL72 rack,
specs/gb200-nvl72/tray-01.yaml .. tray-18.yaml, from the gb200-tray
fixture's node description (tests/fixtures/hw/gb200-tray/expected.json).

Tray 1 is the fixture itself; tray N differs only in what differs between
trays of one rack: id and hostname (gb200-r1-tNN) and the GPUs' UUIDs (their
last byte is the tray number). Every tray keeps the fixture's NVLink fabric
cluster UUID and clique id, so all 72 GPUs are in one corral.io/nvlink-clique,
as NVIDIA's fabric manager puts the GPUs of one NVL72 rack. Run by
scripts/regen-fixtures.sh; tests/unit/test_nvl72.c checks the result.
"""
import copy
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
TRAYS = 18


def load_spec_module():
    spec = importlib.util.spec_from_file_location("spec_from_node",
                                                  os.path.join(HERE, "spec-from-node.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tray(node, n):
    t = copy.deepcopy(node)
    name = "gb200-r1-t%02d" % n
    t["id"] = t["hostname"] = name
    for d in t["devices"]:
        u = d["uuid"][:-2] + "%02x" % n
        if d["isolation_id"] == d["uuid"]:
            d["isolation_id"] = u
        d["uuid"] = u
    return t


def main():
    sfn = load_spec_module()
    src = os.path.join(SRC, "tests/fixtures/hw/gb200-tray/expected.json")
    with open(src, encoding="utf-8") as fp:
        node = json.load(fp)
    if node["hostname"] != "gb200-r1-t01":
        print("nvl72-rack: %s: expected tray gb200-r1-t01" % src, file=sys.stderr)
        return 1
    out = os.path.join(SRC, "specs/gb200-nvl72")
    os.makedirs(out, exist_ok=True)
    for n in range(1, TRAYS + 1):
        t = node if n == 1 else tray(node, n)
        text = sfn.render(t, sfn.spec_of(t), "tests/fixtures/hw/gb200-tray (tray %d of 18)" % n)
        with open(os.path.join(out, "tray-%02d.yaml" % n), "w", encoding="utf-8") as fp:
            fp.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
