"""TPU slices for tasks and actors, as ray.util.tpu has them:

    spg = corral.util.tpu.SlicePlacementGroup(topology="4x4", accelerator_type="TPU-V6E")
    corral.get(spg.placement_group.ready())
    for host in range(spg.num_hosts):
        for chip in range(spg.chips_per_host):
            A.options(resources={"TPU": 1}, scheduling_strategy=spg.strategy(host)).remote()

One bundle per host of one whole slice (STRICT_SPREAD within one
corral.io/tpu-slice-name), bundle i on the slice's worker i (the host with
corral.io/tpu-slice-worker-id=i), so worker 0 of the slice, the one JAX and
torch_xla treat as the coordinator, is in bundle 0. How many chips a host
has is read from the cluster's nodes of that type and topology (a
simulated node says so in its labels, as a real one does).
"""

from .. import _api
from . import PlacementGroupSchedulingStrategy, placement_group

__all__ = ["SlicePlacementGroup", "slice_hosts"]


def _chips(topology):
    try:
        dims = [int(x) for x in topology.lower().split("x")]
        assert dims and all(d > 0 for d in dims)
    except (ValueError, AssertionError, AttributeError):
        raise ValueError("topology=%r: dimensions such as \"4x4\" or \"2x2x2\"" % (topology,))
    n = 1
    for d in dims:
        n *= d
    return n


def slice_hosts(topology, accelerator_type):
    """(hosts, chips per host) of a slice of that topology and type, from
    the cluster's nodes; ValueError naming what is missing."""
    want = accelerator_type.upper()
    per_host = set()
    seen = []
    for n in _api.nodes():
        labels = dict(l.split("=", 1) for l in n.get("labels", []) if "=" in l)
        if labels.get("corral.io/accelerator-type", "").upper() != want:
            continue
        seen.append(labels.get("corral.io/tpu-slice-topology", "?"))
        if labels.get("corral.io/tpu-slice-topology") != topology or n["state"] != "ALIVE":
            continue
        per_host.add(int(n["total"].get("TPU", 0)))
    if not per_host:
        raise ValueError("no alive node of accelerator type %s in a %s slice (the cluster has %s); "
                         "corral nodes shows each node's corral.io/tpu-slice-topology" % (
                             accelerator_type, topology,
                             ", ".join(sorted(set(seen))) + " slices of it" if seen else "none of that type"))
    if len(per_host) != 1 or 0 in per_host:
        raise ValueError("the %s hosts of %s slices do not agree on their chips (%s)" % (
            accelerator_type, topology, sorted(per_host)))
    chips = _chips(topology)
    c = per_host.pop()
    if chips % c:
        raise ValueError("a %s slice has %d chips, not a multiple of the %d a host has" % (topology, chips, c))
    return chips // c, c


class SlicePlacementGroup:
    """A placement group of one whole TPU slice. bundles_per_host=1 (the
    default): bundle i is the slice's host i with all its chips
    (TPU=chips_per_host, plus resources_per_host), for one actor per host
    as JAX's multi-host programs want. bundles_per_host=chips_per_host (or
    any divisor): each host split in that many bundles, host h's bundles at
    h*bundles_per_host.., for one actor per chip, each seeing only its chips
    (TPU_VISIBLE_CHIPS). Worker 0 of the slice is in bundle 0 either way."""

    def __init__(self, topology, accelerator_type, resources_per_host=None, bundles_per_host=1,
                 name="", lifetime=None):
        self.topology = topology
        self.accelerator_type = accelerator_type
        self.num_hosts, self.chips_per_host = slice_hosts(topology, accelerator_type)
        if not isinstance(bundles_per_host, int) or bundles_per_host < 1 or \
                self.chips_per_host % bundles_per_host:
            raise ValueError("bundles_per_host=%r: 1..%d, dividing the %d chips of a host" % (
                bundles_per_host, self.chips_per_host, self.chips_per_host))
        self.bundles_per_host = bundles_per_host
        bundle = {}
        for k, v in (resources_per_host or {}).items():
            bundle[k] = v / bundles_per_host
        bundle["TPU"] = self.chips_per_host // bundles_per_host
        hosts = [h for h in range(self.num_hosts) for _ in range(bundles_per_host)]
        self.placement_group = placement_group(
            [dict(bundle) for _ in hosts],
            # one host per bundle: spread; several bundles per host: their
            # selectors pin them, packed on it
            strategy="STRICT_SPREAD" if bundles_per_host == 1 else "PACK", name=name, lifetime=lifetime,
            bundle_label_selector=[{"corral.io/tpu-slice-worker-id": str(h)} for h in hosts],
            label_selector={"corral.io/accelerator-type": accelerator_type,
                            "corral.io/tpu-slice-topology": topology},
            domain="corral.io/tpu-slice-name")

    @property
    def num_bundles(self):
        return self.num_hosts * self.bundles_per_host

    def bundle_index(self, host, k=0):
        if not 0 <= host < self.num_hosts or not 0 <= k < self.bundles_per_host:
            raise ValueError("host %r, bundle %r: the slice has %d host(s) of %d bundle(s)" % (
                host, k, self.num_hosts, self.bundles_per_host))
        return host * self.bundles_per_host + k

    def strategy(self, host, k=0):
        """scheduling_strategy= for a task or actor in bundle k of the
        slice's host."""
        return PlacementGroupSchedulingStrategy(self.placement_group, self.bundle_index(host, k))

    def ready(self):
        return self.placement_group.ready()

    def remove(self):
        from . import remove_placement_group
        remove_placement_group(self.placement_group)
