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

async function overview() {
  const c = await api('cluster');
  let h = '<h2>Cluster</h2><p>' + c.nodes.length + ' node(s), ' + c.running_jobs + ' running job(s), ' +
    c.pending_jobs + ' pending job(s), ' + c.pending_groups + ' pending group(s)</p>';
  h += '<h3>Resources</h3>' + table(['resource', 'total', 'used', 'free'],
    Object.entries(c.resources).map(([k, r]) => ({cells: [esc(k), qty(k, r.total), qty(k, r.used), qty(k, r.free)]})));
  const types = {};
  for (const n of c.nodes) {
    const t = (n.labels.find(l => l.startsWith('corral.io/accelerator-type=')) || '=none').split('=')[1];
    for (const [k, r] of Object.entries(n.resources)) {
      if (k === 'CPU' || k === 'memory') continue;
      const e = types[t + '/' + k] || (types[t + '/' + k] = {t, k, total: 0, used: 0, free: 0});
      e.total += r.total; e.used += r.used; e.free += r.free;
    }
  }
  h += '<h3>Accelerators by type</h3>' + table(['type', 'resource', 'total', 'used', 'free'],
    Object.values(types).map(e => ({cells: [esc(e.t), esc(e.k), e.total, e.used, e.free]})));
  h += '<h3>Nodes</h3>' + table(['node', 'state', 'address', 'resources (used/total)'],
    c.nodes.map(n => ({cells: ['<a href="#/node/' + encodeURIComponent(n.node_id) + '">' + esc(n.node_id) + '</a>',
      esc(n.state), esc(n.address),
      Object.entries(n.resources).map(([k, r]) => esc(k) + ' ' + qty(k, r.used) + '/' + qty(k, r.total)).join(', ')]})));
  h += '<h3>Holders and pending demand</h3>' + table(['kind', 'id', 'name', 'state', 'holds', 'reason'],
    c.holders.map(x => ({cls: x.state === 'PENDING' ? 'held' : '',
      cells: [esc(x.kind), esc(x.id), esc(x.name), esc(x.state), esc(x.held), esc(x.reason || (x.queue_position ? 'queue #' + x.queue_position : ''))]})));
  main.innerHTML = h;
}

const LINK_COLOR = {nvswitch: '#2a7', nvlink: '#2a7', xgmi: '#c52', 'xgmi-same-gpu': '#c52', ici: '#83c',
  neuronlink: '#e90', roce: '#e90', 'pcie-switch': '#36c', numa: '#999'};
const ACC_LINKS = ['nvlink', 'xgmi', 'xgmi-same-gpu', 'ici', 'neuronlink', 'roce'];

// The graph's elements from a corral.topo/v1 document (docs/dashboard.md):
// accelerators, one NVSwitch node per NVLink island whose GPUs meet through
// switches, NICs and NUMA nodes; edges by link kind, labelled as corral topo.
function topoElements(t, held) {
  const els = [], ix = n => t.names.indexOf(n);
  for (const d of t.devices) {
    const h = held[d.index];
    els.push({data: {id: d.name, label: d.name + '\n' + d.sku + (h ? '\njob ' + h : ''), kind: 'accelerator',
      index: d.index, job: h || ''}, classes: 'acc' + (h ? ' held' : '')});
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

async function nodePage(id, jobFilter) {
  const [t, dv, n] = await Promise.all([api('nodes/' + encodeURIComponent(id) + '/topology'),
    api('nodes/' + encodeURIComponent(id) + '/devices'), api('nodes/' + encodeURIComponent(id))]);
  const held = {};
  for (const d of dv.devices) if (d.job_id && (!jobFilter || d.job_id === jobFilter)) held[d.index] = d.job_id;
  let h = '<h2>Node ' + esc(id) + (t.simulated ? ' (simulated)' : '') + '</h2>';
  if (jobFilter) h += '<p>Showing the devices job <b>' + esc(jobFilter) + '</b> holds (red). <a href="#/node/' +
    encodeURIComponent(id) + '">all jobs</a></p>';
  h += '<h3>Topology</h3><div class="legend">' + Object.entries(LINK_COLOR).map(([k, c]) =>
    '<span><i style="background:' + c + '"></i>' + esc(k) + '</span>').join('') + '</div>';
  h += '<div id="graph"></div>';
  h += '<p>' + esc(n.hostname || id) + ': the same document as <code>corral topo --json</code> at ' +
    '<a href="/api/v1/nodes/' + encodeURIComponent(id) + '/topology">/api/v1/nodes/' + esc(id) + '/topology</a></p>';
  h += '<h3>Utilization</h3><p>Each device\'s utilization % since this page opened, every second ' +
    '(the head keeps no history yet).</p><div id="chart"></div>';
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
    container: document.getElementById('graph'), elements: topoElements(t, held), wheelSensitivity: 0.3,
    layout: {name: 'concentric', concentric: e => level[e.data('kind')], levelWidth: () => 1, minNodeSpacing: 10,
      animate: false},
    style: [
      {selector: 'node', style: {label: 'data(label)', 'text-wrap': 'wrap', 'font-size': 9, 'text-valign': 'center',
        'text-halign': 'center', width: 62, height: 36, shape: 'round-rectangle', 'background-color': '#dde'}},
      {selector: '.acc', style: {'background-color': '#9d9'}},
      {selector: '.held', style: {'background-color': '#e66', 'border-width': 3, 'border-color': '#900'}},
      {selector: '.switch', style: {'background-color': '#2a7', shape: 'hexagon', width: 90, height: 50, color: '#fff'}},
      {selector: '.nic', style: {'background-color': '#acf', shape: 'rectangle'}},
      {selector: '.numa', style: {'background-color': '#eee', shape: 'ellipse', width: 80}},
      {selector: 'edge', style: {width: 2, 'line-color': e => LINK_COLOR[e.data('kind')] || '#999', label: 'data(label)',
        'font-size': 7, 'curve-style': 'bezier'}},
      {selector: 'edge[kind = "numa"]', style: {'line-style': 'dashed', width: 1}},
    ],
  });
  charts(id, dv.devices);
  const count = sel => cy.$(sel).length;
  window.corral = {cy, node: id, graph: {
    accelerators: count('node[kind = "accelerator"]'), nvswitches: count('node[kind = "nvswitch"]'),
    nics: count('node[kind = "nic"]'), numa: count('node[kind = "numa"]'),
    edges: Object.fromEntries(Object.keys(LINK_COLOR).map(k => [k, count('edge[kind = "' + k + '"]')])),
    held: cy.$('node.held').map(e => e.data('index')).sort((a, b) => a - b)}};
}

// uPlot: one line per device, fed by polling the node's devices.
function charts(id, first) {
  const box = document.getElementById('chart');
  if (typeof uPlot !== 'function') {
    box.innerHTML = '<p class="err">the chart library was not built in (scripts/deps.sh; then cmake again)</p>';
    throw new Error('uPlot missing from the build');
  }
  const data = [[]].concat(first.map(() => []));
  const colors = ['#1b9e77', '#d95f02', '#7570b3', '#e7298a', '#66a61e', '#e6ab02', '#a6761d', '#666'];
  const plot = new uPlot({width: Math.min(1000, box.clientWidth || 1000), height: 220,
    scales: {y: {range: [0, 100]}},
    series: [{}].concat(first.map((d, i) => ({label: 'dev ' + d.index, stroke: colors[i % colors.length]})))}, data, box);
  const add = devs => {
    data[0].push(Date.now() / 1000);
    devs.forEach((d, i) => data[i + 1] && data[i + 1].push(d.telemetry ? d.telemetry.utilization_percent : null));
    if (data[0].length > 600) data.forEach(a => a.shift());
    plot.setData(data);
    window.corral.chart = {points: data[0].length, series: devs.length};
  };
  add(first);
  poll = setInterval(() => api('nodes/' + encodeURIComponent(id) + '/devices').then(j => add(j.devices))
    .catch(e => console.error('corral dashboard: ' + e.message)), 1000);
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
  h += '<h3>Placement groups</h3>' + table(['group', 'state', 'bundles'], g.groups.map(x => ({cells: [
    esc(x.name || x.pg_id || ''), esc(x.state || ''), esc(JSON.stringify(x.bundles || []))]})));
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
    else if (p[0] === 'jobs') await jobsPage();
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
