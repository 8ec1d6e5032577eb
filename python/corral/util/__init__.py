"""Placement groups and scheduling strategies for tasks and actors
(docs/actors.md "Placement groups"), as Ray's ray.util has them:

    pg = corral.util.placement_group([{"TPU": 4}] * 4, strategy="STRICT_SPREAD")
    corral.get(pg.ready())
    A.options(scheduling_strategy=corral.util.PlacementGroupSchedulingStrategy(pg, 0)).remote()

A group is the head's placement group (corral pg list shows it); it is
removed with remove_placement_group, or when the driver that made it ends
(lifetime="detached" keeps it).
"""

import threading
import time

from .. import _api

__all__ = ["PlacementGroup", "placement_group", "remove_placement_group", "get_placement_group",
           "PlacementGroupSchedulingStrategy", "NodeAffinitySchedulingStrategy", "placement_group_table"]

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _resources(b, i):
    if not isinstance(b, dict) or not b:
        raise ValueError("bundle %d: a non-empty dict of resources such as {\"TPU\": 4, \"CPU\": 1}, not %r" % (i, b))
    out = []
    for k, v in sorted(b.items()):
        if not isinstance(k, str) or not k:
            raise ValueError("bundle %d: resource names are strings, not %r" % (i, k))
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ValueError("bundle %d: %s=%r is not a quantity (a number not below 0)" % (i, k, v))
        if v:
            out.append("%s=%s" % (k, _api._fmt(v)))
    if not out:
        raise ValueError("bundle %d asks for nothing: %r" % (i, b))
    return ",".join(out)


class PlacementGroup:
    """A group of bundles reserved together on the cluster."""

    def __init__(self, pg_id, bundle_specs, name=""):
        self.id = pg_id
        self.bundle_specs = bundle_specs
        self.name = name

    @property
    def bundle_count(self):
        return len(self.bundle_specs)

    def info(self):
        """The head's view: {pg_id, name, state, reason, strategy, bundles: [{node, devices, ...}]}."""
        return _api._core().head_call("pg_get", self.id)

    def wait(self, timeout_seconds=30):
        """True once the group is CREATED; False after timeout_seconds.
        An infeasible or removed group raises with the head's reason."""
        deadline = time.monotonic() + timeout_seconds
        delay = 0.005
        while True:
            g = self.info()
            if g["state"] == "CREATED":
                return True
            if g["state"] in ("INFEASIBLE", "REMOVED"):
                raise _api.E.TaskUnschedulableError("placement group %s is %s: %s" % (
                    self.id, g["state"], g["reason"] or "no reason given"))
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def ready(self):
        """An ObjectRef that becomes True once the group is CREATED (or fails
        with why): corral.get(pg.ready(), timeout=...)."""
        ref, done, fail = _api._core().future()

        def watch():
            try:
                while not self.wait(3600):
                    pass
                done(True)
            except Exception as e:  # infeasible, removed, the head gone
                fail(e)
        threading.Thread(target=watch, name="corral-pg-ready", daemon=True).start()
        return ref

    def __reduce__(self):
        return (PlacementGroup, (self.id, self.bundle_specs, self.name))

    def __repr__(self):
        return "PlacementGroup(%s, %d bundles)" % (self.id, len(self.bundle_specs))


def placement_group(bundles, strategy="PACK", name="", lifetime=None, bundle_label_selector=None,
                    label_selector=None, domain=None):
    """Reserves bundles (a list of resource dicts) together; returns at once
    (the group may still be PENDING: pg.ready()/pg.wait()). strategy: PACK,
    SPREAD, STRICT_PACK or STRICT_SPREAD. bundle_label_selector: one
    {label: value} per bundle; label_selector: for every node of the group;
    domain: a label key whose one value all the group's nodes share (a TPU
    slice: corral.io/tpu-slice-name)."""
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError("placement_group: bundles is a non-empty list of resource dicts")
    if strategy not in _STRATEGIES:
        raise ValueError("placement_group: strategy=%r: one of %s" % (strategy, ", ".join(_STRATEGIES)))
    if lifetime not in (None, "detached"):
        raise ValueError("placement_group: lifetime=%r: None (ends with this driver) or \"detached\"" % lifetime)
    if bundle_label_selector is not None and len(bundle_label_selector) != len(bundles):
        raise ValueError("placement_group: bundle_label_selector has %d entries for %d bundles" % (
            len(bundle_label_selector), len(bundles)))
    spec = []
    for i, b in enumerate(bundles):
        sel = None
        if bundle_label_selector is not None and bundle_label_selector[i]:
            sel = ",".join(_api._selector(bundle_label_selector[i]))
        spec.append((_resources(b, i), sel))
    sel = ",".join(_api._selector(label_selector)) if label_selector else None
    g = _api._core().head_call("pg_create", spec, strategy=strategy, name=name or None, selector=sel,
                               domain=domain, wait=0, bound=0 if lifetime == "detached" else 1)
    return PlacementGroup(g["pg_id"], [dict(b) for b in bundles], g.get("name") or name)


def get_placement_group(name_or_id):
    g = _api._core().head_call("pg_get", name_or_id)
    return PlacementGroup(g["pg_id"], [{"resources": b["resources"]} for b in g["bundles"]], g["name"])


def remove_placement_group(pg):
    """Releases the group's reservation; tasks and actors placed in it are
    stopped by the head."""
    _api._core().head_call("pg_remove", pg.id if isinstance(pg, PlacementGroup) else str(pg))


def placement_group_table(pg):
    return pg.info()


class PlacementGroupSchedulingStrategy:
    """scheduling_strategy= for a task or actor to run in a group's bundle
    (placement_group_bundle_index=-1: any bundle)."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        if not isinstance(placement_group, PlacementGroup):
            raise TypeError("PlacementGroupSchedulingStrategy: a PlacementGroup, not %s" %
                            type(placement_group).__name__)
        n = len(placement_group.bundle_specs)
        if not isinstance(placement_group_bundle_index, int) or not -1 <= placement_group_bundle_index < n:
            raise ValueError("placement_group_bundle_index=%r: -1 (any) or 0..%d" % (
                placement_group_bundle_index, n - 1))
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


class NodeAffinitySchedulingStrategy:
    """scheduling_strategy= for a task or actor to run on one node (its id,
    as corral nodes shows it). soft=True is not offered: corral's selector
    is a hard constraint."""

    def __init__(self, node_id, soft=False):
        if soft:
            raise ValueError("NodeAffinitySchedulingStrategy(soft=True): corral places on the node or "
                             "waits for it; leave soft out")
        self.node_id = node_id
        self.soft = False
