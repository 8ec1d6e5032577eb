#!/usr/bin/env python3
"""Turn a node description (the JSON `corral hw --json` prints, schema
corral.node/v1) into a readable YAML hardware spec for the sim backend.

    corral hw --json > node.json
    scripts/spec-from-node.py node.json > specs/my-machine.yaml
    corral hw --spec specs/my-machine.yaml     # the same node, simulated

Fields at their defaults are left out (hw/node_json.c fills them back in),
sizes are written as 80Gi-style strings where exact, and what corral derives
again when it loads the spec (warnings, the node-id and simulated labels) is
dropped. Python standard library only: the YAML is written here.
"""
import argparse
import json
import re
import sys

SCHEMA = "corral.node/v1"

# Field defaults, as hw_node_from_json leaves a field it was not given.
DEVICE_DEFAULTS = {
    "backend": "", "vendor": "", "resource": "", "sku": "", "product": "", "uuid": "",
    "pci": "", "pci_path": "", "pci_vendor": "0x0000", "pci_device": "0x0000", "numa": -1,
    "cpus": "", "nic": "", "memory": 0, "compute_units": 0, "cores": 0,
    "compute_capability": "", "isolation_id": "", "vendor_index": -1, "driver": "",
    "health": "unknown", "health_reason": "", "parent": -1, "mig_enabled": False,
    "mig_profile": "", "partition": -1, "memory_numa": -1, "coords": [],
}
LINK_DEFAULTS = {"count": 1, "bandwidth_gbps": 0}
DOMAIN_DEFAULTS = {"name": "", "accelerator_type": "", "topology": "", "worker_id": -1,
                   "worker_count": 0, "members": [], "hosts": []}
NIC_DEFAULTS = {"name": "", "pci": "", "pci_path": "", "numa": -1, "speed_mbps": 0,
                "rdma": False, "rdma_device": ""}
NUMA_DEFAULTS = {"cpus": "", "memory": 0}
PLATFORM_DEFAULTS = {k: "" for k in ("provider", "region", "zone", "rack", "market",
                                     "instance_type", "k8s_node")}
CPU_DEFAULTS = {"model": "", "sockets": 0, "cores": 0, "threads": 0}
SIZE_FIELDS = {"memory"}  # bytes: written as 80Gi where exact
# Labels corral sets itself every time it describes a node.
DERIVED_LABELS = {"corral.io/node-id", "corral.io/simulated"}


class Size(int):
    """A number of bytes, written with a binary unit when one divides it."""


def sized(v):
    return Size(v) if isinstance(v, int) and not isinstance(v, bool) else v


def drop_defaults(obj, defaults):
    out = {}
    for k, v in obj.items():
        if k in defaults and v == defaults[k] and type(v) is type(defaults[k]):
            continue
        if k in defaults and isinstance(v, float) and v == defaults[k]:
            continue
        out[k] = sized(v) if k in SIZE_FIELDS else v
    return out


# ---- YAML output ----

# A plain scalar that a YAML 1.2 reader (and corral's loader) reads back as
# the same string; anything else is double-quoted.
PLAIN_OK = re.compile(r"^[A-Za-z_./+][A-Za-z0-9_./+@() -]*$|^[0-9][A-Za-z0-9_./+-]*$")
NOT_A_STRING = re.compile(
    r"^(~|null|Null|NULL|true|True|TRUE|false|False|FALSE"
    r"|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"  # YAML 1.1 readers
    r"|[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+"
    r"|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$")


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, Size):
        for unit, shift in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            if v >= (1 << shift) and v % (1 << shift) == 0:
                return "%d%s" % (v >> shift, unit)
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if NOT_A_STRING.match(r) else json.dumps(v)
    s = str(v)
    if (PLAIN_OK.match(s) and not NOT_A_STRING.match(s) and not s.endswith(" ")
            and " #" not in s):
        return s
    return json.dumps(s, ensure_ascii=False)


def flow(v):
    if isinstance(v, dict):
        return "{" + ", ".join("%s: %s" % (scalar(k), flow(x)) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(flow(x) for x in v) + "]"
    return scalar(v)


def is_flat(v):
    """Small and flat enough for one line."""
    if isinstance(v, list):
        return all(not isinstance(x, (dict, list)) for x in v)
    if isinstance(v, dict):
        return all(not isinstance(x, (dict, list)) or (isinstance(x, list) and is_flat(x))
                   for x in v.values()) and len(flow(v)) <= 96
    return True


def emit(out, key, v, indent, blank_between=False):
    pad = "  " * indent
    head = "%s%s:" % (pad, scalar(key))
    if isinstance(v, dict):
        if not v:
            out.append(head + " {}")
            return
        out.append(head)
        for k, x in v.items():
            emit(out, k, x, indent + 1)
    elif isinstance(v, list):
        if not v or is_flat(v):
            out.append("%s %s" % (head, flow(v)))
            return
        out.append(head)
        for i, x in enumerate(v):
            if blank_between and i:
                out.append("")
            if isinstance(x, dict) and not is_flat(x):
                first = True
                for k, y in x.items():
                    sub = []
                    emit(sub, k, y, indent + 2)
                    sub[0] = "%s- %s" % (pad + "  ", sub[0].lstrip()) if first else sub[0]
                    first = False
                    out.extend(sub)
            else:
                out.append("%s  - %s" % (pad, flow(x)))
    else:
        out.append("%s %s" % (head, scalar(v)))


# ---- node description to spec ----

def spec_of(node):
    if not isinstance(node, dict):
        raise ValueError("a node description is a JSON object")
    if node.get("schema", SCHEMA) != SCHEMA:
        raise ValueError("schema %r, this script reads %s" % (node.get("schema"), SCHEMA))
    spec = {}
    for k in ("id", "hostname"):
        if node.get(k):
            spec[k] = node[k]
    if node.get("addresses"):
        spec["addresses"] = node["addresses"]
    labels = {k: v for k, v in node.get("labels", {}).items() if k not in DERIVED_LABELS}
    if labels:
        spec["labels"] = labels
    plat = drop_defaults(node.get("platform", {}), PLATFORM_DEFAULTS)
    if plat:
        spec["platform"] = plat
    cpu_in = node.get("cpu", {})
    cpu = drop_defaults({k: v for k, v in cpu_in.items() if k != "numa_nodes"}, CPU_DEFAULTS)
    numa = []
    for i, nm in enumerate(cpu_in.get("numa_nodes", [])):
        x = drop_defaults(nm, dict(NUMA_DEFAULTS, id=i))
        numa.append(x)
    if numa:
        cpu["numa_nodes"] = numa
    if cpu:
        spec["cpu"] = cpu
    if node.get("memory"):
        spec["memory"] = Size(node["memory"])
    devices = []
    for i, d in enumerate(node.get("devices", [])):
        devices.append(drop_defaults(d, dict(DEVICE_DEFAULTS, index=i)))
    if devices:
        spec["devices"] = devices
    links = [drop_defaults(l, LINK_DEFAULTS) for l in node.get("links", [])]
    if links:
        spec["links"] = links
    domains = [drop_defaults(d, DOMAIN_DEFAULTS) for d in node.get("domains", [])]
    if domains:
        spec["domains"] = domains
    nics = [drop_defaults(n, NIC_DEFAULTS) for n in node.get("nics", [])]
    if nics:
        spec["nics"] = nics
    # a spec states its resources; corral derives them only when none are given
    if node.get("resources"):
        spec["resources"] = node["resources"]
    return spec


def header(node, source):
    devs = node.get("devices", [])
    kinds = {}
    for d in devs:
        name = d.get("sku") or d.get("product") or d.get("resource") or "?"
        kinds[name] = kinds.get(name, 0) + 1
    what = ", ".join("%dx %s" % (n, k) for k, n in kinds.items()) or "no accelerators"
    lines = [
        "# corral hardware spec (%s), generated by scripts/spec-from-node.py" % SCHEMA,
        "# from the node description of %s (hostname %s): %s"
        % (node.get("id") or "?", node.get("hostname") or "?", what),
        "# source: %s" % source,
        "# Load it with `corral hw --spec FILE`; fields left out take their defaults",
        "# (docs/node-description.md).",
    ]
    if node.get("simulated"):
        lines.append("# The source node was itself simulated (loaded from a spec).")
    return lines


def render(node, spec, source):
    """The YAML text of spec (spec_of(node)), with its header."""
    out = header(node, source)
    order = ["id", "hostname", "addresses", "labels", "platform", "cpu", "memory", "devices",
             "links", "domains", "nics", "resources"]
    for k in order:
        if k in spec:
            if k in ("devices", "cpu", "links", "domains", "nics", "resources"):
                out.append("")
            emit(out, k, spec[k], 0, blank_between=(k == "devices"))
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("node_json", nargs="?", default="-",
                    help="node description JSON (corral hw --json); '-' or nothing: stdin")
    ap.add_argument("-o", "--output", help="write the spec here instead of stdout")
    args = ap.parse_args(argv)
    try:
        if args.node_json == "-":
            node, source = json.load(sys.stdin), "standard input"
        else:
            with open(args.node_json, encoding="utf-8") as fp:
                node, source = json.load(fp), args.node_json
        spec = spec_of(node)
    except (OSError, ValueError) as e:
        print("spec-from-node: %s: %s" % (args.node_json, e), file=sys.stderr)
        return 1
    text = render(node, spec, source)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fp:
            fp.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
