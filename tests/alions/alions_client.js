'use strict';
// The classic Node.js client ali-ons against a cluster: its nameSrv is the controllers' addresses
// (NAMESRV: one, or several separated by ','), given as the README says: an array.
//   node alions_client.js produce NAMESRV TOPIC COUNT
//     sends COUNT messages (tags TagA/TagB in turn, key key-<i>, user property seq=<i>);
//     prints {"sent": [{msgId, queueId, queueOffset, key}]}
//   node alions_client.js fail NAMESRV TOPIC GROUP COUNT MAX
//     a push consumer whose handler fails every message (maxReconsumeTimes MAX): each comes back
//     through CONSUMER_SEND_MSG_BACK and the group's retry topic until its retries are used up;
//     waits until each of COUNT messages was delivered MAX + 1 times; prints {"deliveries":
//     [{body, reconsumeTimes, topic, keys}]}
//   node alions_client.js share NAMESRV TOPIC GROUP COUNT QUEUES
//     two push consumers of GROUP (instances a and b) share the topic's QUEUES queues; once
//     each pulls queues of its own COUNT messages are sent, then b leaves and, once a pulls
//     every queue, COUNT more are sent; prints {"first": {a: [queueIds], b:
//     [...]}, "second": {a: [...], b: [...]}, "bodies": [every body received]}
//   node alions_client.js keep-sending NAMESRV TOPIC COUNT
//     sends COUNT messages one at a time, each again until acknowledged (a master may die
//     meanwhile), printing "acked <i>" as each is; then {"acked": [{body, msgId}], "errors": n}
//   node alions_client.js keep-sending-and-consuming NAMESRV TOPIC GROUP COUNT
//     as keep-sending, with a push consumer of GROUP (from the first offset) running all along,
//     printing "got <body>" as each arrives; once every message is acknowledged, waits until the
//     consumer got each of them (60 s at most); then {"acked": [...], "errors": n, "received":
//     [every body, in arrival order, duplicates kept]}
//   node alions_client.js listen NAMESRV TOPIC GROUP
//     a push consumer of GROUP (from the first offset) printing "ready" once started, then
//     "got <body>" as each message arrives, until its stdin closes; then {"received": n}
//   node alions_client.js consume NAMESRV TOPIC GROUP COUNT
//     a push consumer of GROUP from the first offset, until COUNT messages arrived and their
//     offsets were committed; prints {"received": [{body, tags, keys, seq, msgId, queueId,
//     queueOffset}]}
// Its last stdout line is the JSON; ali-ons' own log goes to stderr. With ALIONS_ACCESS_KEY and
// ALIONS_SECRET_KEY set, producers and consumers sign their requests (RocketMQ's ACL 1.0).
const { Producer, Consumer, Message } = require('ali-ons');

const [mode, nameSrvList, topic, ...rest] = process.argv.slice(2);
const nameSrv = nameSrvList.split(',');
// nameSrv given: ali-ons never asks the HTTP address service, but it insists on a client.
const httpclient = { request() { throw new Error('no HTTP name server lookup in this test'); } };
const keys = process.env.ALIONS_ACCESS_KEY
  ? { accessKey: process.env.ALIONS_ACCESS_KEY, secretKey: process.env.ALIONS_SECRET_KEY }
  : {};
const logger = {
  info() {}, debug() {}, log() {},
  warn(...args) { console.error('WARN', ...args); },
  error(...args) { console.error('ERROR', ...args); },
};

async function produce(count) {
  const producer = new Producer({ ...keys, httpclient, nameSrv, producerGroup: 'alions-producer', logger });
  await producer.ready();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 === 0 ? 'TagA' : 'TagB', Buffer.from(`alions-${i}`));
    msg.keys = [ `key-${i}` ];
    msg.properties.seq = String(i);
    const result = await producer.send(msg);
    if (result.sendStatus !== 'SEND_OK') throw new Error(`send ${i}: ${result.sendStatus}`);
    sent.push({ msgId: result.msgId, queueId: Number(result.messageQueue.queueId),
      queueOffset: result.queueOffset, key: `key-${i}` });
  }
  await producer.close();
  return { sent };
}

// A push consumer of `group` from the first offset: offsets committed every 500 ms, a pull
// held 2 s at the broker (5 s client timeout), a rebalance every second; `options` add to or
// replace these.
function newConsumer(group, options = {}) {
  return new Consumer({
    ...keys, httpclient, nameSrv, consumerGroup: group, logger,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    persistConsumerOffsetInterval: 500,
    brokerSuspendMaxTimeMillis: 2000,
    consumerTimeoutMillisWhenSuspend: 5000,
    rebalanceInterval: 1000,
    ...options,
  });
}

function keepProducer(group) {
  const producer = new Producer({
    ...keys, httpclient, nameSrv, producerGroup: group, logger,
    pollNameServerInteval: 500, sendMsgTimeout: 2000,
  });
  producer.on('error', () => {});
  return producer;
}

// Sends keep-0 .. keep-<count - 1>, each again until acknowledged (60 s each at most).
async function sendAll(producer, count) {
  const acked = [];
  let errors = 0;
  for (let i = 0; i < count; i++) {
    const deadline = Date.now() + 60000;
    for (;;) {
      try {
        const result = await producer.send(new Message(topic, 'K', Buffer.from(`keep-${i}`)));
        if (result.sendStatus === 'SEND_OK') {
          acked.push({ body: `keep-${i}`, msgId: result.msgId });
          process.stdout.write(`acked ${i}\n`);
          break;
        }
      } catch (err) {
        errors++;
      }
      if (Date.now() > deadline) throw new Error(`keep-${i} not acknowledged in 60 s`);
      await new Promise(resolve => setTimeout(resolve, 200));
    }
  }
  return { acked, errors };
}

async function keepSending(count) {
  const producer = keepProducer('alions-keep');
  await producer.ready();
  const out = await sendAll(producer, count);
  await producer.close();
  return out;
}

async function keepSendingAndConsuming(group, count) {
  const consumer = newConsumer(group, {
    pollNameServerInteval: 500,
    heartbeatBrokerInterval: 1000,
    brokerSuspendMaxTimeMillis: 1000,
    consumerTimeoutMillisWhenSuspend: 3000,
  });
  consumer.on('error', () => {}); // pulls from the dead master fail until the route moves
  const received = [];
  consumer.subscribe(topic, '*', async msg => {
    const body = msg.body.toString();
    received.push(body);
    process.stdout.write(`got ${body}\n`);
  });
  await consumer.ready();
  const producer = keepProducer('alions-keep-both');
  await producer.ready();
  const out = await sendAll(producer, count);
  const got = () => new Set(received);
  await until(() => out.acked.every(a => got().has(a.body)), 'every acknowledged message', 60000);
  // The consumer first: the two share ali-ons' client, whose errors (a route query for the
  // group's retry topic, say) go to the producer too, and a closed producer has no listener.
  await consumer.close();
  await producer.close();
  return { ...out, received };
}

async function consume(group, count) {
  const consumer = newConsumer(group);
  const received = [];
  let done;
  const all = new Promise(resolve => { done = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    received.push({ body: msg.body.toString(), tags: msg.tags, keys: msg.keys, seq: msg.properties.seq,
      msgId: msg.msgId, queueId: Number(msg.queueId), queueOffset: Number(msg.queueOffset) });
    if (received.length >= count) done();
  });
  await consumer.ready();
  await all;
  // The offsets go to the broker every persistConsumerOffsetInterval and when it closes.
  await new Promise(resolve => setTimeout(resolve, 1500));
  await consumer.close();
  return { received };
}

async function listen(group) {
  const consumer = newConsumer(group);
  let received = 0;
  consumer.subscribe(topic, '*', async msg => {
    received += 1;
    process.stdout.write(`got ${msg.body.toString()}\n`);
  });
  await consumer.ready();
  process.stdout.write('ready\n');
  await new Promise(resolve => { process.stdin.on('end', resolve); process.stdin.resume(); });
  await consumer.close();
  return { received };
}

async function fail(group, count, max) {
  const consumer = newConsumer(group, {
    maxReconsumeTimes: max,
    pollNameServerInteval: 1000,
    heartbeatBrokerInterval: 1000,
  });
  consumer.on('error', () => {}); // each failure is reported here: expected
  const deliveries = [];
  const seen = new Map();
  let done;
  const all = new Promise(resolve => { done = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    const body = msg.body.toString();
    deliveries.push({ body, reconsumeTimes: msg.reconsumeTimes, topic: msg.topic, keys: msg.keys });
    seen.set(body, (seen.get(body) || 0) + 1);
    if (seen.size >= count && [ ...seen.values() ].every(n => n >= max + 1)) setTimeout(done, 1500);
    throw new Error(`failing ${body} on purpose`);
  });
  await consumer.ready();
  await all;
  await consumer.close();
  return { deliveries };
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function until(condition, what, ms) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function share(group, count, queues) {
  let phase = 'first';
  const seen = { first: { a: new Set(), b: new Set() }, second: { a: new Set(), b: new Set() } };
  const bodies = new Set();
  const consumers = {};
  for (const name of [ 'a', 'b' ]) {
    consumers[name] = newConsumer(group, {
      instanceName: name, heartbeatBrokerInterval: 1000, brokerSuspendMaxTimeMillis: 1000,
    });
    consumers[name].subscribe(topic, '*', async msg => {
      seen[phase][name].add(Number(msg.queueId));
      bodies.add(msg.body.toString());
    });
    await consumers[name].ready();
  }
  const producer = new Producer({ ...keys, httpclient, nameSrv, producerGroup: 'alions-share', logger });
  await producer.ready();
  // The queues of the topic a member pulls: what its rebalance gave it.
  const held = name => [ ...consumers[name].processQueueTable.values() ]
    .filter(item => item.messageQueue.topic === topic)
    .map(item => Number(item.messageQueue.queueId));
  const split = () => {
    const a = held('a');
    const b = held('b');
    return a.length > 0 && b.length > 0 && new Set([ ...a, ...b ]).size === queues &&
      a.length + b.length === queues;
  };
  await until(split, 'both members pulling queues of their own', 30000);
  for (let i = 0; i < count; i++) await producer.send(new Message(topic, 'T', Buffer.from(`one-${i}`)));
  await until(() => [ ...bodies ].filter(b => b.startsWith('one-')).length >= count, 'the first batch', 30000);
  await consumers.b.close();
  await until(() => held('a').length === queues, "a's rebalance taking b's queues", 30000);
  phase = 'second';
  for (let i = 0; i < count; i++) await producer.send(new Message(topic, 'T', Buffer.from(`two-${i}`)));
  await until(() => [ ...bodies ].filter(b => b.startsWith('two-')).length >= count, 'the second batch', 30000);
  await consumers.a.close();
  await producer.close();
  const lists = p => ({ a: [ ...seen[p].a ].sort(), b: [ ...seen[p].b ].sort() });
  return { first: lists('first'), second: lists('second'), bodies: [ ...bodies ].sort() };
}

(async () => {
  let out;
  if (mode === 'produce') out = await produce(Number(rest[0]));
  else if (mode === 'consume') out = await consume(rest[0], Number(rest[1]));
  else if (mode === 'listen') out = await listen(rest[0]);
  else if (mode === 'keep-sending') out = await keepSending(Number(rest[0]));
  else if (mode === 'keep-sending-and-consuming') {
    out = await keepSendingAndConsuming(rest[0], Number(rest[1]));
  }
  else if (mode === 'share') out = await share(rest[0], Number(rest[1]), Number(rest[2]));
  else if (mode === 'fail') out = await fail(rest[0], Number(rest[1]), Number(rest[2]));
  else throw new Error(`unknown mode ${mode}`);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || err);
  process.exit(1);
});
