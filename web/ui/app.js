// corral's dashboard (docs/dashboard.md): one page, hash routes, everything
// read from the head's /api/v1 with the login cookie. No outside fetches.
'use strict';
const main = document.getElementById('main');
let stream = null;      // the open event stream's AbortController on #/events
let poll = null;        // the node page's telemetry timer
window.corral = {};     // what the page drew, for tests/cli/dashboard.sh

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
async function api(path) {
  const r = await fetch('/api/v1/' + path, {credentials: 'same-origin'});
  const j = await r.json();
  if (!r.ok) throw new Error(path + ': ' + (j.error || r.status));
  return j;
}
function table(head, rows) {
  return '<table><tr>' + head.map(h => '<th>' + esc(h) + '</th>').join('') + '</tr>' +
    rows.map(r => '<tr' + (r.cls ? ' class="' + r.cls + '"' : '') + '>' +
      r.cells.map(c => '<td>' + c + '</td>').join('') + '</tr>').join('') + '</table>';
}
function qty(name, v) {
  return name === 'memory' ? (v / 2 ** 30).toFixed(0) + ' GiB' : String(v);
}

// The overview reads /api/v1/summary (counts and sums, the same size at
// 10 nodes or 10,000) and one page of /api/v1/nodes; #/nodes/TOKEN is the
// page that starts at TOKEN (the "continue" of the page before).
const NODE_PAGE = 100;
async function overview(cont) {
  const [c, np] = await Promise.all([api('summary'),
    api('nodes?limit=' + NODE_PAGE + (cont ? '&continue=' + encodeURIComponent(cont) : ''))]);
  const st = Object.entries(c.nodes_by_state).filter(([, v]) => v).map(([k, v]) => v + ' ' + k).join(', ');
  let h = '<h2>Cluster</h2><p>' + c.nodes_total + ' node(s)' + (st ? ' (' + esc(st) + ')' : '') + ', ' +
    c.running_jobs + ' running job(s), ' + c.pending_jobs + ' pending job(s), ' + c.pending_groups + ' pending group(s)</p>';
  h += '<h3>Resources</h3>' + table(['resource', 'total', 'used', 'free'],
    Object.entries(c.resources).map(([k, r]) => ({cells: [esc(k), qty(k, r.total), qty(k, r.used), qty(k, r.free)]})));
  h += '<h3>Accelerators by type</h3>' + table(['type', 'resource', 'nodes', 'total', 'used', 'free'],
    c.accelerators.map(e => ({cells: [esc(e.type), esc(e.resource), e.nodes, e.total, e.used, e.free]})));
  if (c.accelerators_not_listed) h += '<p>' + c.accelerators_not_listed + ' more type(s) not listed</p>';
  const from = cont ? +cont : 0, last = from + np.nodes.length;
  const nav = '<p class="pager">nodes ' + (np.nodes.length ? from + 1 : 0) + '–' + last + ' of ' + np.total +
    (from > 0 ? ' <a href="#/nodes/' + Math.max(0, from - NODE_PAGE) + '">previous</a>' : '') +
    (np.continue ? ' <a href="#/nodes/' + encodeURIComponent(np.continue) + '">next</a>' : '') + '</p>';
  h += '<h3>Nodes</h3>' + nav + table(['node', 'state', 'address', 'resources (used/total)'],
    np.nodes.map(n => ({cells: ['<a href="#/node/' + encodeURIComponent(n.node_id) + '">' + esc(n.node_id) + '</a>',
      esc(n.state), esc(n.address),
      Object.entries(n.resources).map(([k, r]) => esc(k) + ' ' + qty(k, r.used) + '/' + qty(k, r.total)).join(', ')]})));
  if (c.slices.length)
    h += '<h3>TPU slices</h3>' + table(['slice', 'hosts'], c.slices.map(x => ({cells: [
      '<a href="#/slice/' + encodeURIComponent(x.name) + '">' + esc(x.name) + '</a>', x.hosts]}))) +
      (c.slices_not_listed ? '<p>' + c.slices_not_listed + ' more slice(s) not listed</p>' : '');
  h += '<h3>Holders and pending demand</h3>' + table(['kind', 'id', 'name', 'state', 'holds', 'reason'],
    c.holders.map(x => ({cls: x.state === 'PENDING' ? 'held' : '',
      cells: [esc(x.kind), esc(x.id), esc(x.name), esc(x.state), esc(x.held), esc(x.reason || (x.queue_position ? 'queue #' + x.queue_position : ''))]}))) +
    (c.holders_not_listed ? '<p>' + c.holders_not_listed + ' more job(s) and group(s) not listed (the oldest 100 of each kind are)</p>' : '');
  main.innerHTML = h;
  window.corral.overview = {from, nodes_shown: np.nodes.length, nodes_total: np.total, next: np.continue};
}

const LINK_COLOR = {nvswitch: '#2a7', nvlink: '#2a7', xgmi: '#c52', 'xgmi-same-gpu': '#c52', ici: '#83c',
  neuronlink: '#e90', roce: '#e90', 'pcie-switch': '#36c', numa: '#999'};
const ACC_LINKS = ['nvlink', 'xgmi', 'xgmi-same-gpu', 'ici', 'neuronlink', 'roce'];

// The graph's elements from a corral.topo/v1 document (docs/dashboard.md):
// accelerators, one NVSwitch node per NVLink island whose GPUs meet through
// switches, NICs and NUMA nodes; edges by link kind, labelled as corral topo.
function topoElements(t, held, grouped) {
  const els = [], ix = n => t.names.indexOf(n);
  grouped = grouped || {};
  for (const d of t.devices) {
    const h = held[d.index], g = grouped[d.index];
    els.push({data: {id: d.name, label: d.name + '\n' + d.sku + (h ? '\njob ' + h : '') + (g ? '\ngroup ' + g : ''),
      kind: 'accelerator', index: d.index, job: h || '', group: g || ''},
      classes: 'acc' + (h ? ' held' : '') + (g ? ' grouped' : '')});
  }
  (t.islands || []).forEach((isl, k) => {
    const m = isl.members;
    const viaSwitch = m.some((a, i) => m.some((b, j) => j > i && t.kinds[ix(a)][ix(b)] === 'nvswitch'));
    if (!viaSwitch) return;
    const sw = 'NVSwitch' + k;
    els.push({data: {id: sw, label: 'NVSwitch fabric ' + k, kind: 'nvswitch'}, classes: 'switch'});
    for (const a of m) {
      const peer = m.find(b => b !== a && t.kinds[ix(a)][ix(b)] === 'nvswitch');
      if (!peer) continue;
      els.push({data: {id: a + '-' + sw, source: a, target: sw, kind: 'nvswitch',
        label: t.matrix[ix(a)][ix(peer)], links: t.counts[ix(a)][ix(peer)]}});
    }
  });
  for (let i = 0; i < t.devices.length; i++)
    for (let j = i + 1; j < t.devices.length; j++) {
      const a = t.devices[i].name, b = t.devices[j].name, k = t.kinds[ix(a)][ix(b)];
      if (ACC_LINKS.includes(k))
        els.push({data: {id: a + '-' + b, source: a, target: b, kind: k, label: t.matrix[ix(a)][ix(b)],
          links: t.counts[ix(a)][ix(b)]}});
    }
  for (const n of t.nics)
    els.push({data: {id: n.name, label: n.name + '\n' + n.interface + (n.speed_mbps ? ' ' + n.speed_mbps / 1000 + ' Gb/s' : ''),
      kind: 'nic'}, classes: 'nic'});
  for (const d of t.devices)
    if (d.nearest_nic && d.nearest_nic_relation === 'PIX')
      els.push({data: {id: d.name + '-' + d.nearest_nic, source: d.name, target: d.nearest_nic, kind: 'pcie-switch', label: 'PIX'}});
  for (const z of t.numa || []) {
    const id = 'NUMA' + z.id;
    els.push({data: {id, label: 'NUMA ' + z.id + '\nCPUs ' + z.cpus, kind: 'numa'}, classes: 'numa'});
    for (const m of (z.devices || []).concat(z.nics || []))
      els.push({data: {id: m + '-' + id, source: m, target: id, kind: 'numa', label: ''}});
  }
  return els;
}

// Which placement group holds which device of a node: {index: "name bundle k"}
// from the groups' placed bundles (a bundle that names no devices holds none).
function groupedOn(groups, nodeId) {
  const g = {};
  for (const x of groups)
    if (x.state === 'CREATED')
      for (const b of x.bundles || [])
        if (b.node_id === nodeId) for (const i of b.devices || []) g[i] = (x.name || x.pg_id) + ' bundle ' + b.index;
  return g;
}

async function nodePage(id, jobFilter) {
  const e = encodeURIComponent(id);
  const [t, dv, n, hist, pg] = await Promise.all([api('nodes/' + e + '/topology'), api('nodes/' + e + '/devices'),
    api('nodes/' + e), api('nodes/' + e + '/telemetry'), api('pgs')]);
  const held = {}, grouped = jobFilter ? {} : groupedOn(pg.groups, id);
  for (const d of dv.devices) if (d.job_id && (!jobFilter || d.job_id === jobFilter)) held[d.index] = d.job_id;
  let h = '<h2>Node ' + esc(id) + (t.simulated ? ' (simulated)' : '') + '</h2>';
  if (jobFilter) h += '<p>Showing the devices job <b>' + esc(jobFilter) + '</b> holds (red). <a href="#/node/' +
    encodeURIComponent(id) + '">all jobs</a></p>';
  h += '<h3>Topology</h3><div class="legend">' + Object.entries(LINK_COLOR).map(([k, c]) =>
    '<span><i style="background:' + c + '"></i>' + esc(k) + '</span>').join('') + '</div>';
  h += '<div id="graph"></div>';
  h += '<p>' + esc(n.hostname || id) + ': the same document as <code>corral topo --json</code> at ' +
    '<a href="/api/v1/nodes/' + encodeURIComponent(id) + '/topology">/api/v1/nodes/' + esc(id) + '/topology</a></p>';
  h += '<h3>Utilization</h3><p>Each device\'s utilization %: the head\'s last hour (a sample every ' +
    (hist.period_ms / 1000) + ' s), then every second while this page is open.</p><div id="chart"></div>';
  h += '<h3>Devices</h3>' + table(['index', 'uuid', 'product', 'memory', 'health', 'job', 'worker', 'utilization %', 'telemetry'],
    dv.devices.map(d => ({cls: held[d.index] ? 'held' : '', cells: [d.index, esc(d.uuid), esc(d.product),
      (d.memory_bytes / 2 ** 30).toFixed(0) + ' GiB', esc(d.health), esc(d.job_id || ''), esc(d.worker_id || ''),
      d.telemetry && d.telemetry.utilization_percent !== undefined ? d.telemetry.utilization_percent : '',
      esc(d.telemetry_source || '')]})));
  main.innerHTML = h;
  if (typeof cytoscape !== 'function') {
    document.getElementById('graph').innerHTML = '<p class="err">the graph library was not built in ' +
      '(scripts/deps.sh installs it; then cmake again)</p>';
    throw new Error('cytoscape missing from the build');
  }
  const level = {nvswitch: 4, accelerator: 3, nic: 2, numa: 1};
  const cy = cytoscape({
    container: document.getElementById('graph'), elements: topoElements(t, held, grouped), wheelSensitivity: 0.3,
    layout: {name: 'concentric', concentric: e => level[e.data('kind')], levelWidth: () => 1, minNodeSpacing: 10,
      animate: false},
    style: [
      {selector: 'node', style: {label: 'data(label)', 'text-wrap': 'wrap', 'font-size': 9, 'text-valign': 'center',
        'text-halign': 'center', width: 62, height: 36, shape: 'round-rectangle', 'background-color': '#dde'}},
      {selector: '.acc', style: {'background-color': '#9d9'}},
      {selector: '.grouped', style: {'border-width': 3, 'border-color': '#36c', 'border-style': 'dashed'}},
      {selector: '.held', style: {'background-color': '#e66', 'border-width': 3, 'border-color': '#900'}},
      {selector: '.switch', style: {'background-color': '#2a7', shape: 'hexagon', width: 90, height: 50, color: '#fff'}},
      {selector: '.nic', style: {'background-color': '#acf', shape: 'rectangle'}},
      {selector: '.numa', style: {'background-color': '#eee', shape: 'ellipse', width: 80}},
      {selector: 'edge', style: {width: 2, 'line-color': e => LINK_COLOR[e.data('kind')] || '#999', label: 'data(label)',
        'font-size': 7, 'curve-style': 'bezier'}},
      {selector: 'edge[kind = "numa"]', style: {'line-style': 'dashed', width: 1}},
    ],
  });
  const count = sel => cy.$(sel).length;
  window.corral = {cy, node: id, graph: {
    accelerators: count('node[kind = "accelerator"]'), nvswitches: count('node[kind = "nvswitch"]'),
    nics: count('node[kind = "nic"]'), numa: count('node[kind = "numa"]'),
    edges: Object.fromEntries(Object.keys(LINK_COLOR).map(k => [k, count('edge[kind = "' + k + '"]')])),
    held: cy.$('node.held').map(e => e.data('index')).sort((a, b) => a - b),
    grouped: cy.$('node.grouped').map(e => e.data('index')).sort((a, b) => a - b)}};
  charts(id, dv.devices, hist);
}

// uPlot: one line per device, the head's history first (the union of its
// sample times, null where a device had none), then fed by polling.
function charts(id, first, hist) {
  const box = document.getElementById('chart');
  if (typeof uPlot !== 'function') {
    box.innerHTML = '<p class="err">the chart library was not built in (scripts/deps.sh; then cmake again)</p>';
    throw new Error('uPlot missing from the build');
  }
  const byIndex = {};
  for (const d of (hist && hist.devices) || []) byIndex[d.index] = d;
  const times = [...new Set(first.flatMap(d => (byIndex[d.index] || {time_ms: []}).time_ms))].sort((a, b) => a - b);
  const data = [times.map(t => t / 1000)].concat(first.map(d => {
    const h = byIndex[d.index], at = {};
    if (h) h.time_ms.forEach((t, k) => { at[t] = h.utilization_percent[k]; });
    return times.map(t => (t in at ? at[t] : null));
  }));
  const history = times.length;
  const colors = ['#1b9e77', '#d95f02', '#7570b3', '#e7298a', '#66a61e', '#e6ab02', '#a6761d', '#666'];
  const plot = new uPlot({width: Math.min(1000, box.clientWidth || 1000), height: 220,
    scales: {y: {range: [0, 100]}},
    series: [{}].concat(first.map((d, i) => ({label: 'dev ' + d.index, stroke: colors[i % colors.length], spanGaps: true})))}, data, box);
  const add = devs => {
    data[0].push(Date.now() / 1000);
    devs.forEach((d, i) => data[i + 1] && data[i + 1].push(d.telemetry ? d.telemetry.utilization_percent : null));
    while (data[0].length > history + 600) data.forEach(a => a.shift());
    plot.setData(data);
    window.corral.chart = {points: data[0].length, series: devs.length, history,
      history_points: first.map((d, i) => data[i + 1].slice(0, history).filter(v => v !== null).length)};
  };
  add(first);
  poll = setInterval(() => api('nodes/' + encodeURIComponent(id) + '/devices').then(j => add(j.devices))
    .catch(e => console.error('corral dashboard: ' + e.message)), 1000);
}

// A TPU slice (the nodes of one corral.io/tpu-slice-name): its chips at
// their mesh coordinates, boxed by host, ICI edges between neighbours,
// the chips a job holds in red and those a group's bundle holds outlined.
const SLICE = 'corral.io/tpu-slice-name=';
function sliceOf(n) { return (n.labels.find(l => l.startsWith(SLICE)) || '').slice(SLICE.length); }

async function slicePage(name) {
  const pg = await api('pgs'), hosts = [];
  for (let cont = null; ;) { // the slice's hosts, page by page: not the whole cluster
    const np = await api('nodes?limit=1000&label=' + encodeURIComponent(SLICE + name) +
      (cont ? '&continue=' + encodeURIComponent(cont) : ''));
    hosts.push(...np.nodes.filter(n => sliceOf(n) === name));
    if (!(cont = np.continue)) break;
  }
  const wid = n => +((n.labels.find(l => l.startsWith('corral.io/tpu-slice-worker-id=')) || '=0').split('=')[1]);
  hosts.sort((a, b) => wid(a) - wid(b));
  if (!hosts.length) throw new Error('no node carries ' + SLICE + name);
  const devs = await Promise.all(hosts.map(n => api('nodes/' + encodeURIComponent(n.node_id) + '/devices')));
  const label = (n, k) => (n.labels.find(l => l.startsWith(k + '=')) || '=').split('=')[1];
  const chips = [];
  hosts.forEach((n, k) => {
    const g = groupedOn(pg.groups, n.node_id);
    for (const d of devs[k].devices)
      if (d.coords) chips.push({node: n.node_id, worker: label(n, 'corral.io/tpu-slice-worker-id'), index: d.index,
        coords: d.coords, job: d.job_id || '', group: g[d.index] || '', util: d.telemetry ? d.telemetry.utilization_percent : null});
  });
  const maxX = Math.max(0, ...chips.map(x => x.coords[0]));
  const topo = label(hosts[0], 'corral.io/tpu-slice-topology'), type = label(hosts[0], 'corral.io/tpu-slice-pod-type');
  let h = '<h2>TPU slice ' + esc(name) + '</h2><p>' + esc(type) + ', topology ' + esc(topo) + ': ' + chips.length +
    ' chip(s) on ' + hosts.length + ' host(s). Red: held by a job; blue outline: reserved by a placement group.</p>' +
    '<div id="graph"></div>';
  h += '<h3>Chips</h3>' + table(['coords', 'host', 'worker', 'chip', 'job', 'group', 'utilization %'],
    chips.map(x => ({cls: x.job ? 'held' : '', cells: ['(' + x.coords.join(',') + ')',
      '<a href="#/node/' + encodeURIComponent(x.node) + '">' + esc(x.node) + '</a>', esc(x.worker), x.index,
      esc(x.job), esc(x.group), x.util === null ? '' : x.util]})));
  main.innerHTML = h;
  if (typeof cytoscape !== 'function') throw new Error('cytoscape missing from the build');
  const els = [], id = x => x.node + '/' + x.index, at = {};
  for (const n of hosts) els.push({data: {id: 'host:' + n.node_id, label: n.node_id, kind: 'host'}, classes: 'host'});
  for (const x of chips) {
    const [cx, cy, cz] = [x.coords[0], x.coords[1], x.coords[2] || 0];
    at[[cx, cy, cz].join(',')] = id(x);
    els.push({data: {id: id(x), parent: 'host:' + x.node, kind: 'chip', coords: x.coords, job: x.job, group: x.group,
      label: '(' + x.coords.join(',') + ')\n' + x.node + ' #' + x.index + (x.job ? '\njob ' + x.job : '') +
        (x.group ? '\n' + x.group : '')},
      position: {x: (cx + cz * (maxX + 2)) * 150, y: cy * 110},
      classes: 'acc' + (x.job ? ' held' : '') + (x.group ? ' grouped' : '')});
  }
  for (const x of chips) {
    const [cx, cy, cz] = [x.coords[0], x.coords[1], x.coords[2] || 0];
    for (const [dx, dy, dz] of [[1, 0, 0], [0, 1, 0], [0, 0, 1]]) {
      const o = at[[cx + dx, cy + dy, cz + dz].join(',')];
      if (o) els.push({data: {id: id(x) + '-' + o, source: id(x), target: o, kind: 'ici', label: ''}});
    }
  }
  const cy = cytoscape({container: document.getElementById('graph'), elements: els, layout: {name: 'preset', padding: 30},
    style: [
      {selector: 'node', style: {label: 'data(label)', 'text-wrap': 'wrap', 'font-size': 9, 'text-valign': 'center',
        'text-halign': 'center', width: 110, height: 70, shape: 'round-rectangle', 'background-color': '#9d9'}},
      {selector: '.host', style: {'background-color': '#f4f4fa', 'text-valign': 'top', 'font-size': 11, 'border-width': 1}},
      {selector: '.grouped', style: {'border-width': 4, 'border-color': '#36c', 'border-style': 'dashed'}},
      {selector: '.held', style: {'background-color': '#e66'}},
      {selector: 'edge', style: {width: 3, 'line-color': LINK_COLOR.ici}},
    ]});
  const pick = sel => cy.$(sel).map(e => e.data('coords').join(',')).sort();
  window.corral = {cy, slice: {name, hosts: hosts.length, chips: cy.$('node[kind = "chip"]').length,
    coords: pick('node[kind = "chip"]'), held: pick('node.held'), grouped: pick('node.grouped'),
    ici: cy.$('edge[kind = "ici"]').length}};
}

async function jobsPage() {
  const j = await api('jobs');
  const rows = [];
  for (const job of j.jobs)
    for (const w of job.workers.length ? job.workers : [{}])
      rows.push({cls: w.devices ? 'held' : '', cells: [esc(job.job_id), esc(job.name), esc(job.state), esc(job.reason || ''),
        esc(w.worker_id || ''), w.node_id ? '<a href="#/node/' + encodeURIComponent(w.node_id) + '/job/' +
        encodeURIComponent(job.job_id) + '">' + esc(w.node_id) + '</a>' : '', esc(w.devices || '')]});
  let h = '<h2>Jobs</h2><p>A node link draws the job onto that node\'s topology.</p>' +
    table(['job', 'name', 'state', 'reason', 'worker', 'node', 'devices'], rows);
  const g = await api('pgs');
  h += '<h3>Placement groups</h3><p>A node link draws the group\'s bundles onto that node\'s topology.</p>' +
    table(['group', 'state', 'bundle', 'resources', 'node', 'devices'], g.groups.flatMap(x =>
      (x.bundles && x.bundles.length ? x.bundles : [{}]).map(b => ({cells: [esc(x.name || x.pg_id || ''), esc(x.state || ''),
        b.index === undefined ? '' : b.index, esc(b.resources || ''),
        b.node_id ? '<a href="#/node/' + encodeURIComponent(b.node_id) + '">' + esc(b.node_id) + '</a>' : '',
        esc((b.devices || []).join(','))]}))));
  main.innerHTML = h;
}

// The stream read with fetch, not EventSource: each event comes named by
// its kind ("event: placed"), and this takes every kind without a list.
async function eventsPage() {
  main.innerHTML = '<h2>Events (live)</h2><div id="events"></div>';
  const box = document.getElementById('events');
  let n = 0, rest = '';
  stream = new AbortController();
  window.corral = {events: 0, ready: true};
  const r = await fetch('/api/v1/events/stream?since=0', {credentials: 'same-origin', signal: stream.signal});
  if (!r.ok) throw new Error('events/stream: ' + r.status);
  const rd = r.body.getReader(), dec = new TextDecoder();
  for (;;) {
    let chunk;
    try { chunk = await rd.read(); } catch (e) { return; } // closed by route()
    if (chunk.done) return;
    rest += dec.decode(chunk.value, {stream: true});
    let k;
    while ((k = rest.indexOf('\n\n')) >= 0) {
      const block = rest.slice(0, k); rest = rest.slice(k + 2);
      const data = block.split('\n').filter(l => l.startsWith('data: ')).map(l => l.slice(6)).join('\n');
      if (!data) continue;
      const e = JSON.parse(data);
      box.textContent += new Date(e.time_ms).toISOString() + ' #' + e.seq + ' ' + e.kind +
        (e.job_id ? ' job ' + e.job_id : '') + (e.node_id ? ' on ' + e.node_id : '') + ': ' + e.message + '\n';
      window.corral.events = ++n;
    }
  }
}

async function route() {
  if (stream) { stream.abort(); stream = null; }
  if (poll) { clearInterval(poll); poll = null; }
  window.corral = {};
  const p = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  try {
    if (p[0] === 'node' && p[1]) await nodePage(p[1], p[2] === 'job' ? p[3] : null);
    else if (p[0] === 'slice' && p[1]) await slicePage(p[1]);
    else if (p[0] === 'jobs') await jobsPage();
    else if (p[0] === 'nodes' && p[1]) await overview(p[1]);
    else if (p[0] === 'events') { eventsPage().catch(e => { if (e.name !== 'AbortError') console.error('corral dashboard: ' + e.message); }); }
    else await overview();
    window.corral.ready = true;
  } catch (e) {
    main.insertAdjacentHTML('beforeend', '<p class="err">' + esc(e.message) + '</p>');
    console.error('corral dashboard: ' + e.message);
  }
}
window.addEventListener('hashchange', route);
route();
