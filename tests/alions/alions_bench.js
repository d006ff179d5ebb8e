'use strict';
// The ali-ons producer for bench/classic_bench.py, phase by phase over stdin/stdout:
//   node alions_bench.js NAMESRV TOPIC COUNT SIZE
// warms up (routes, connections: up to 200 sends), prints {"phase":"ready"} and waits for a line on stdin; then
// sends COUNT messages of SIZE bytes with 64 in flight and prints {"phase":"sent", rate, cpu,
// p50, failed, error} (cpu: this process's user + system seconds over the phase); then sends
// max(COUNT / 20, 50) one at a time and prints {"phase":"one", p50, p99, count} and exits.
// ali-ons' own log goes to stderr.
const { Producer, Message } = require('ali-ons');

const [nameSrv, topic, countText, sizeText] = process.argv.slice(2);
const count = Number(countText);
const size = Number(sizeText);
const INFLIGHT = 64;
const httpclient = { request() { throw new Error('no HTTP name server lookup in this bench'); } };
const logger = {
  info() {}, debug() {}, log() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};
const hex = '0123456789abcdef';
let text = '';
for (let i = 0; i < size; i++) text += hex[Math.floor(Math.random() * 16)];
const body = Buffer.from(text);

const say = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const pct = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

function lineFromStdin() {
  return new Promise(resolve => process.stdin.once('data', resolve));
}

async function sendOne(producer) {
  const result = await producer.send(new Message(topic, 'Bench', body));
  if (result.sendStatus !== 'SEND_OK') throw new Error(`send: ${result.sendStatus}`);
}

(async () => {
  const producer = new Producer({ httpclient, nameSrv, producerGroup: 'classic-bench', logger });
  await producer.ready();
  for (let i = 0; i < Math.min(200, count); i++) await sendOne(producer); // warm up
  say({ phase: 'ready' });
  await lineFromStdin();

  const lat = [];
  const failed = [];
  let next = 0;
  async function worker() {
    while (next < count) {
      next++;
      const t = nowMs();
      try {
        await sendOne(producer);
      } catch (err) {
        failed.push(String(err && err.message || err));
      }
      lat.push(nowMs() - t);
    }
  }
  const c0 = process.cpuUsage();
  const t0 = nowMs();
  await Promise.all(Array.from({ length: INFLIGHT }, worker));
  const dt = (nowMs() - t0) / 1000;
  const used = process.cpuUsage(c0);
  lat.sort((a, b) => a - b);
  say({ phase: 'sent', rate: count / dt, cpu: (used.user + used.system) / 1e6, p50: pct(lat, 0.5),
    failed: failed.length, error: failed[0] || '' });

  const one = [];
  for (let i = 0; i < Math.max(Math.floor(count / 20), 50); i++) {
    const t = nowMs();
    await sendOne(producer);
    one.push(nowMs() - t);
  }
  one.sort((a, b) => a - b);
  say({ phase: 'one', p50: pct(one, 0.5), p99: pct(one, 0.99), count: one.length });
  await producer.close();
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || err);
  process.exit(1);
});
